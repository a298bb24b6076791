package client_test

import "unsafe"

func addrOf(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
