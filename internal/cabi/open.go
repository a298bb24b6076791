package cabi

import (
	"context"
	"errors"
	"log/slog"

	"github.com/kvfabric/kvfabric/internal/config"
)

// openStore opens the Store behind a new handle. Tests replace it.
var openStore = func(ctx context.Context, cfg config.Config, log *slog.Logger) (Backend, error) {
	return nil, errors.New("cabi: client.Store not yet available")
}
