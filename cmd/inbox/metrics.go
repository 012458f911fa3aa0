package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// serveMetrics serves, at http://addr/metrics, the metrics recorded
// through the global OpenTelemetry MeterProvider, which it sets to one
// exported to Prometheus: otelinbox.New(nil) then records there. It stops
// when ctx is done or shutdown is called, whichever comes first; shutdown
// also flushes and ends the MeterProvider.
func serveMetrics(ctx context.Context, addr string) (shutdown func(context.Context) error, err error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	otel.SetMeterProvider(mp)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ErrServerClosed after shutdown
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	return func(ctx context.Context) error {
		stop()
		return errors.Join(srv.Shutdown(ctx), mp.Shutdown(ctx))
	}, nil
}
