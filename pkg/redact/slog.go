package redact

import (
	"context"
	"log/slog"
)

// Handler wraps h so that every error logged through it is redacted as
// String redacts text, with the secrets of sources hidden too: errors are
// where a connection string turns up unannounced. Other values are left
// alone: a value known to hold a URI is redacted where it is logged.
func Handler(h slog.Handler, sources ...string) slog.Handler {
	return &handler{next: h, sources: sources}
}

type handler struct {
	next    slog.Handler
	sources []string
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{next: h.next.WithAttrs(h.attrs(attrs)), sources: h.sources}
}

func (h *handler) attrs(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = h.attr(a)
	}
	return out
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), sources: h.sources}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindGroup:
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(h.attrs(v.Group())...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.Any(a.Key, Error(err, h.sources...))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
