package cabi

import (
	"context"
	"errors"
	"log/slog"

	"github.com/kvfabric/kvfabric/internal/client"
	"github.com/kvfabric/kvfabric/internal/config"
)

var _ Backend = (*client.Store)(nil)

// openStore opens the Store behind a new handle. Tests replace it.
var openStore = func(ctx context.Context, cfg config.Config, log *slog.Logger) (Backend, error) {
	drv, err := faultDriver(cfg)
	if err != nil {
		return nil, err
	}
	opts := client.Options{Logger: log}
	if drv != nil {
		opts.Driver = drv
	}
	s, err := client.Open(ctx, cfg, opts)
	if err != nil {
		var oe *client.OpenError
		if errors.As(err, &oe) {
			// Open failed and could not release everything: hand out a
			// handle whose Close retries the release.
			return &failedOpen{err: err, retry: oe.Retry}, err
		}
		if drv != nil {
			_ = drv.Close()
		}
		return nil, err
	}
	if drv != nil {
		return &ownedDriver{Backend: s, drv: drv}, nil
	}
	return s, nil
}
