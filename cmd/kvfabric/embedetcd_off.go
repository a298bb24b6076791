//go:build kvfabric_noembed

package main

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfabric/kvfabric/internal/ha"
)

// startEmbeddedEtcd: this binary was built without the etcd server
// (-tags kvfabric_noembed, the GPU machine's copy; ~8 MiB smaller).
func startEmbeddedEtcd(context.Context, ha.EtcdConfig) (*clientv3.Client, func(), error) {
	return nil, nil, errors.New("this kvfabric was built without the embedded etcd (-tags kvfabric_noembed); use --etcd-endpoints")
}
