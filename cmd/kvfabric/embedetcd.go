//go:build !kvfabric_noembed

package main

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"github.com/kvfabric/kvfabric/internal/ha"
)

// startEmbeddedEtcd runs `kvfabric master --embedded-etcd`'s etcd member
// and returns an in-process client of it and a function that stops both.
func startEmbeddedEtcd(ctx context.Context, c ha.EtcdConfig) (*clientv3.Client, func(), error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e, err := ha.StartEtcd(sctx, c)
	if err != nil {
		return nil, nil, err
	}
	cli := v3client.New(e.Server)
	return cli, func() { cli.Close(); e.Close() }, nil
}
