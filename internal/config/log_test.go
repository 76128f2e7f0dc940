package config

import (
	"io"
	"log/slog"
)

func logTo(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }
