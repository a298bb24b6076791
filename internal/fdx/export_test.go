package fdx

// SetServerUIDForTest makes s believe it runs as uid, so a same-uid peer is
// treated as foreign (the real cross-uid path is covered when tests run as
// root, see TestPeerCredOtherUID).
func SetServerUIDForTest(s *Server, uid uint32) { s.uid.Store(uid) }

// FailNextClose makes the next fd close in Unregister report err after
// really closing the fd (as Linux does: the descriptor is released even when
// close fails).
func FailNextClose(err error) (restore func()) {
	old := closeFD
	closeFD = func(fd int) error {
		closeFD = old
		_ = old(fd)
		return err
	}
	return func() { closeFD = old }
}

// SetAfterConnect runs f in every Fetch between its connect and its
// request; the returned func restores the hook.
func SetAfterConnect(f func()) (restore func()) {
	old := afterConnect
	afterConnect = f
	return func() { afterConnect = old }
}
