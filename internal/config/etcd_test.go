package config

import (
	"errors"
	"slices"
	"testing"
)

func TestParseEtcdAddr(t *testing.T) {
	for _, tc := range []struct {
		addr      string
		endpoints []string
		prefix    string
		bad       bool
	}{
		{addr: "etcd://127.0.0.1:2379", endpoints: []string{"127.0.0.1:2379"}, prefix: DefaultEtcdPrefix},
		{addr: "etcd://a:1,b:2,[::1]:3/kvfabric/rack1", endpoints: []string{"a:1", "b:2", "[::1]:3"}, prefix: "/kvfabric/rack1"},
		{addr: "etcd://a:1/p/", endpoints: []string{"a:1"}, prefix: "/p"},
		{addr: "etcd://", bad: true},
		{addr: "etcd://a", bad: true},
		{addr: "etcd://a:1,/p", bad: true},
		{addr: "etcd://a:1/", bad: true},
		{addr: "a:1", bad: true},
	} {
		eps, prefix, err := ParseEtcdAddr(tc.addr)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: no error (endpoints %v prefix %q)", tc.addr, eps, prefix)
			}
			continue
		}
		if err != nil || !slices.Equal(eps, tc.endpoints) || prefix != tc.prefix {
			t.Errorf("%q: %v %q %v; want %v %q", tc.addr, eps, prefix, err, tc.endpoints, tc.prefix)
		}
	}
	c := Defaults()
	c.MasterServerAddr = "etcd://a"
	if err := c.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("master_server_addr etcd://a: %v, want ErrInvalid", err)
	}
	c.MasterServerAddr = "etcd://a:2379/kvfabric/x"
	if err := c.Validate(); err != nil {
		t.Errorf("master_server_addr %s: %v", c.MasterServerAddr, err)
	}
}
