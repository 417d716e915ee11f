package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server"
	"github.com/dlock-dev/dlock/dlockotel"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/store/redlock"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// serve runs the HTTP service on b until ctx ends, then shuts it down
// gracefully and closes the Locker (releasing what it still holds).
func serve(ctx context.Context, x *cmd, f *serveFlags, b *backend, log *slog.Logger) error {
	m := dlockprom.New()
	observe := m.Observe
	var tracing server.Config
	if f.otlpEndpoint != "" {
		defer routeOTelLogs(log)() // after shutdownTracing: its flush's errors are logged too
		tp, err := newTracerProvider(ctx, f.otlpEndpoint, buildVersion().Version)
		if err != nil {
			return wrap("setting up the OTLP exporter", err)
		}
		defer shutdownTracing(tp, log)
		o, err := dlockotel.New(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(noop.NewMeterProvider()))
		if err != nil {
			return err
		}
		tracing.TracerProvider, tracing.Observer = tp, o.Observe
		observe = func(ev dlock.Event) {
			m.Observe(ev)
			o.Observe(ev)
		}
		log.Info("dlock: exporting spans", "otlp", f.otlpEndpoint)
	}
	locker, err := newLocker(b, log, dlock.WithObserver(observe))
	if err != nil {
		return err
	}
	storeName := b.name
	if rl, ok := b.store.(*redlock.Store); ok {
		storeName = fmt.Sprintf("redlock(%d)", rl.Nodes())
	}
	srv, err := server.New(locker, server.Config{
		Addr:      f.addr,
		AuthToken: x.store.authToken,
		AuthFile:  f.authFile,
		TLSCert:   f.tls.cert,
		TLSKey:    f.tls.key,
		ClientCA:  f.tls.clientCA,
		Logger:    log,
		Metrics:   m,
		StoreName: storeName,
		Version:   buildVersion().Version,

		TracerProvider: tracing.TracerProvider,
		Observer:       tracing.Observer,

		ShutdownTimeout: f.shutdownTimeout,
		MaxEventStreams: f.maxEventStreams,
	})
	if err != nil {
		locker.Close()
		return err
	}
	stopReload := reloadOnHangup(srv, log)
	err = srv.ListenAndServe(ctx)
	if errors.Is(err, syscall.EADDRINUSE) {
		err = fmt.Errorf("%w: another process listens on %s; stop it or choose another address with --addr", err, f.addr)
	}
	stopReload()
	if cerr := locker.Close(); cerr != nil && err == nil {
		log.Warn("dlock: releasing leases at shutdown", "err", cerr)
	}
	return err
}

// shutdownTracing flushes the spans still batched, for up to 5 seconds.
func shutdownTracing(tp *sdktrace.TracerProvider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("dlock: flushing spans to the OTLP collector", "err", err)
	}
}

// reloadOnHangup rereads the server's auth file and TLS files on each SIGHUP until the
// returned func is called (which waits for it to stop). A file that cannot
// be read or parsed is logged and the one in force kept.
func reloadOnHangup(srv *server.Server, log *slog.Logger) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-hup:
				if err := srv.ReloadAuth(); err != nil {
					log.Warn("dlock: SIGHUP: auth file not reloaded; the previous one stays in force", "err", err)
				}
				if err := srv.ReloadTLS(); err != nil {
					log.Warn("dlock: SIGHUP: TLS certificate not reloaded; the previous one stays in force", "err", err)
				}
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(stop)
		<-done
	}
}
