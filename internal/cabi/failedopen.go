package cabi

import (
	"context"
	"fmt"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/cuda"
)

// failedOpen stands behind the handle of an Open that failed and could not
// release everything it built (a *client.OpenError): every operation fails
// with ErrClosed, and Close retries the release.
type failedOpen struct {
	err   error
	retry func() error
}

var _ Backend = (*failedOpen)(nil)

func (f *failedOpen) closed() error {
	return fmt.Errorf("%w: open failed: %v", client.ErrClosed, f.err)
}

func (f *failedOpen) Close() error { return f.retry() }

// CleanupPending is true until a Close succeeded; the handle is released
// then, so it is never asked afterwards.
func (f *failedOpen) CleanupPending() bool { return true }

func (f *failedOpen) Put(context.Context, string, []client.Region, cuda.Stream, client.PutOptions) error {
	return f.closed()
}

func (f *failedOpen) Get(context.Context, string, []client.Region, cuda.Stream) (uint64, error) {
	return 0, f.closed()
}

func (f *failedOpen) BatchPut(_ context.Context, keys []string, _ [][]client.Region, _ cuda.Stream, _ client.PutOptions) []error {
	errs := make([]error, len(keys))
	for i := range errs {
		errs[i] = f.closed()
	}
	return errs
}

func (f *failedOpen) BatchGet(_ context.Context, keys []string, _ [][]client.Region, _ cuda.Stream) ([]uint64, []error) {
	return make([]uint64, len(keys)), f.BatchPut(nil, keys, nil, 0, client.PutOptions{})
}

func (f *failedOpen) PutBytes(context.Context, string, []byte, client.PutOptions) error {
	return f.closed()
}
func (f *failedOpen) GetBytesInto(context.Context, string, []byte) (uint64, error) {
	return 0, f.closed()
}
func (f *failedOpen) Exists(context.Context, string) (bool, error) { return false, f.closed() }
func (f *failedOpen) BatchExists(context.Context, []string, bool) ([]bool, error) {
	return nil, f.closed()
}
func (f *failedOpen) Size(context.Context, string) (uint64, error) { return 0, f.closed() }
func (f *failedOpen) Remove(context.Context, string, bool) error   { return f.closed() }
func (f *failedOpen) BatchRemove(_ context.Context, keys []string, _ bool) []error {
	return f.BatchPut(nil, keys, nil, 0, client.PutOptions{})
}
func (f *failedOpen) RemoveMatching(context.Context, string, bool) (int, error) { return 0, f.closed() }
func (f *failedOpen) BatchGetRanges(_ context.Context, keys []string, _ [][]client.Span, _ cuda.Stream) []error {
	return f.BatchPut(nil, keys, nil, 0, client.PutOptions{})
}
func (f *failedOpen) Replicas(_ context.Context, keys []string) ([]client.ObjectInfo, []error) {
	return make([]client.ObjectInfo, len(keys)), f.BatchPut(nil, keys, nil, 0, client.PutOptions{})
}
func (f *failedOpen) Acquire(context.Context, []string) (*client.Views, error) {
	return nil, f.closed()
}
func (f *failedOpen) Gather(context.Context, []string, client.Rows, uint64, client.Region, cuda.Stream) error {
	return f.closed()
}
func (f *failedOpen) RegisterBuffer(uintptr, uint64) error            { return f.closed() }
func (f *failedOpen) UnregisterBuffer(context.Context, uintptr) error { return f.closed() }
func (f *failedOpen) Hostname() string                                { return "" }
func (f *failedOpen) DriverName() string                              { return "" }
func (f *failedOpen) HandleType() string                              { return "" }
func (f *failedOpen) Health(context.Context) error                    { return f.closed() }
