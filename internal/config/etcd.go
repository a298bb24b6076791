package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// EtcdScheme starts a master_server_addr that names the masters' etcd
// cluster instead of one master.
const EtcdScheme = "etcd://"

// DefaultEtcdPrefix is the key prefix of a master_server_addr without one
// (and of `kvfabric master --etcd-prefix`).
const DefaultEtcdPrefix = "/kvfabric/default"

// IsEtcdAddr reports whether addr names an etcd cluster (etcd://…).
func IsEtcdAddr(addr string) bool { return strings.HasPrefix(addr, EtcdScheme) }

// ParseEtcdAddr splits "etcd://host:port[,host:port…][/prefix]" into its
// endpoints and key prefix (DefaultEtcdPrefix when none is given). The
// prefix is the masters' --etcd-prefix: the cluster's name in etcd.
func ParseEtcdAddr(addr string) (endpoints []string, prefix string, err error) {
	rest, ok := strings.CutPrefix(addr, EtcdScheme)
	if !ok {
		return nil, "", fmt.Errorf("want %shost:port[,host:port…][/prefix]", EtcdScheme)
	}
	hosts, path, slash := strings.Cut(rest, "/")
	prefix = DefaultEtcdPrefix
	if slash {
		prefix = "/" + strings.TrimRight(path, "/")
		if prefix == "/" {
			return nil, "", errors.New("empty etcd prefix after the hosts")
		}
	}
	for h := range strings.SplitSeq(hosts, ",") {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, "", fmt.Errorf("etcd endpoint %q: want host:port", h)
		}
		endpoints = append(endpoints, h)
	}
	return endpoints, prefix, nil
}
