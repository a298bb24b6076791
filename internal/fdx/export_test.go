package fdx

// SetServerUIDForTest makes s believe it runs as uid, so a same-uid peer is
// treated as foreign (the real cross-uid path is covered when tests run as
// root, see TestPeerCredOtherUID).
func SetServerUIDForTest(s *Server, uid uint32) { s.uid.Store(uid) }
