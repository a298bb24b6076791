package master

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvfabric/kvfabric/api/kvfabric/v1"
)

// errorDomain is the ErrorInfo domain of kvfabric master errors.
const errorDomain = "kvfabric.master"

// wireCodes maps each sentinel to its gRPC code and ErrorInfo reason. The
// reason, not the code, identifies the sentinel on the way back (several
// sentinels share a code).
var wireCodes = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{ErrInvalid, codes.InvalidArgument, "INVALID"},
	{ErrNotFound, codes.NotFound, "NOT_FOUND"},
	{ErrAlreadyExists, codes.AlreadyExists, "ALREADY_EXISTS"},
	{ErrNoSpace, codes.ResourceExhausted, "NO_SPACE"},
	{ErrHasLease, codes.Unavailable, "HAS_LEASE"},
	{ErrWrongState, codes.FailedPrecondition, "WRONG_STATE"},
	{ErrUnknownSegment, codes.NotFound, "UNKNOWN_SEGMENT"},
	{ErrGenerationMismatch, codes.FailedPrecondition, "GENERATION_MISMATCH"},
	{ErrUnknownClient, codes.NotFound, "UNKNOWN_CLIENT"},
	{ErrClosed, codes.Unavailable, "CLOSED"},
	{ErrPermission, codes.PermissionDenied, "PERMISSION_DENIED"},
	{ErrUnauthenticated, codes.Unauthenticated, "UNAUTHENTICATED"},
	{ErrQuota, codes.ResourceExhausted, "QUOTA"},
	{ErrNotLeader, codes.Unavailable, "NOT_LEADER"},
	{context.Canceled, codes.Canceled, "CANCELED"},
	{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
}

func classify(err error) (codes.Code, string) {
	for _, w := range wireCodes {
		if errors.Is(err, w.err) {
			return w.code, w.reason
		}
	}
	return codes.Internal, ""
}

// toStatus turns a Service error into a gRPC status error carrying the
// message and an ErrorInfo with the reason.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	code, reason := classify(err)
	st := status.New(code, err.Error())
	if reason != "" {
		info := &errdetails.ErrorInfo{Reason: reason, Domain: errorDomain}
		var nl *NotLeaderError
		if errors.As(err, &nl) {
			info.Metadata = notLeaderMetadata(nl)
		}
		if d, derr := st.WithDetails(info); derr == nil {
			st = d
		}
	}
	return st.Err()
}

func toItemError(err error) *pb.ItemError {
	if err == nil {
		return nil
	}
	code, reason := classify(err)
	return &pb.ItemError{Code: uint32(code), Reason: reason, Message: err.Error()}
}

// wireError is an error decoded from the wire: the server's message, and
// the sentinel for errors.Is.
type wireError struct {
	msg      string
	sentinel error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.sentinel }

func sentinelFor(reason string) error {
	for _, w := range wireCodes {
		if w.reason == reason {
			return w.err
		}
	}
	return nil
}

// fromItemError decodes an item result; nil or code 0 is success.
func fromItemError(e *pb.ItemError) error {
	if e == nil || e.Code == 0 {
		return nil
	}
	if s := sentinelFor(e.Reason); s != nil {
		return &wireError{msg: e.Message, sentinel: s}
	}
	return status.Error(codes.Code(e.Code), e.Message)
}

// fromStatus decodes an RPC error: kvfabric errors become wireErrors,
// context cancellation and deadlines their context errors, anything else
// (transport failures) stays a gRPC status error.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errorDomain {
			if info.Reason == "NOT_LEADER" {
				return notLeaderFromMetadata(st.Message(), info.Metadata)
			}
			if s := sentinelFor(info.Reason); s != nil {
				return &wireError{msg: st.Message(), sentinel: s}
			}
		}
	}
	switch st.Code() {
	case codes.Canceled:
		return &wireError{msg: context.Canceled.Error(), sentinel: context.Canceled}
	case codes.DeadlineExceeded:
		return &wireError{msg: context.DeadlineExceeded.Error(), sentinel: context.DeadlineExceeded}
	}
	return err
}
