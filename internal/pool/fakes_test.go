package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/kvfabric/kvfabric/internal/segment"
)

var (
	errInjectedMount = errors.New("fake: injected mount failure")
	errInjectedFD    = errors.New("fake: injected fd registry failure")
)

// fakeMounter records mounts. failMount/failUnmount make the Nth call
// (1-based, counted over the fake's life) fail without effect. Mounting a
// mounted key or unmounting an unmounted one is recorded as a violation.
type fakeMounter struct {
	mu          sync.Mutex
	mounted     map[segment.Key]segment.Descriptor
	mounts      int // calls
	unmounts    int // calls
	okUnmounts  map[segment.Key]int
	violations  []string
	failMount   int
	failUnmount int
}

func newFakeMounter() *fakeMounter {
	return &fakeMounter{mounted: map[segment.Key]segment.Descriptor{}, okUnmounts: map[segment.Key]int{}}
}

func (m *fakeMounter) MountSegment(ctx context.Context, d segment.Descriptor) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mounts++
	if m.mounts == m.failMount {
		return errInjectedMount
	}
	if err := d.Validate(); err != nil {
		m.violations = append(m.violations, err.Error())
		return err
	}
	if _, ok := m.mounted[d.Key()]; ok {
		m.violations = append(m.violations, "mounted twice: "+d.Key().String())
	}
	m.mounted[d.Key()] = d
	return nil
}

func (m *fakeMounter) UnmountSegment(ctx context.Context, k segment.Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unmounts++
	if m.unmounts == m.failUnmount {
		return errInjectedMount
	}
	if _, ok := m.mounted[k]; !ok {
		m.violations = append(m.violations, "unmount of unmounted "+k.String())
	}
	delete(m.mounted, k)
	m.okUnmounts[k]++
	return nil
}

func (m *fakeMounter) check() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, v := range m.violations {
		errs = append(errs, errors.New(v))
	}
	for k, n := range m.okUnmounts {
		if n != 1 {
			errs = append(errs, fmt.Errorf("%s unmounted %d times", k, n))
		}
	}
	return errors.Join(errs...)
}

func (m *fakeMounter) numMounted() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mounted)
}

// fakeFDs is an FDRegistry that holds fds in a map. failRegister and
// failUnregister make the Nth call fail without effect (the caller keeps,
// respectively the registry keeps, the fd).
type fakeFDs struct {
	mu             sync.Mutex
	fds            map[segment.Key]int
	registers      int
	unregisters    int
	failRegister   int
	failUnregister int
	violations     []string
}

func newFakeFDs() *fakeFDs { return &fakeFDs{fds: map[segment.Key]int{}} }

func (f *fakeFDs) Register(k segment.Key, fd int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registers++
	if f.registers == f.failRegister {
		return errInjectedFD
	}
	if _, ok := f.fds[k]; ok {
		f.violations = append(f.violations, "registered twice: "+k.String())
	}
	f.fds[k] = fd
	return nil
}

func (f *fakeFDs) Unregister(k segment.Key) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unregisters++
	if f.unregisters == f.failUnregister {
		return errInjectedFD
	}
	fd, ok := f.fds[k]
	if !ok {
		f.violations = append(f.violations, "unregister of unregistered "+k.String())
		return fmt.Errorf("fake: %s not registered", k)
	}
	delete(f.fds, k)
	return syscall.Close(fd)
}

func (f *fakeFDs) SocketPath() string { return "/nonexistent/fake-fdx.sock" }

// fd returns the fd registered for k.
func (f *fakeFDs) fd(k segment.Key) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, ok := f.fds[k]
	return fd, ok
}

func (f *fakeFDs) check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, v := range f.violations {
		errs = append(errs, errors.New(v))
	}
	if len(f.fds) != 0 {
		errs = append(errs, fmt.Errorf("%d fds still registered", len(f.fds)))
	}
	return errors.Join(errs...)
}
