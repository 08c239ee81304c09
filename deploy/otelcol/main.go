// Command otelcol is an OpenTelemetry Collector of three components, built
// from the Collector's Go modules: the OTLP receiver (gRPC and HTTP), the
// contrib file exporter (OTLP JSON, one line per export) and the debug
// exporter. It is the real receiver of the order system's tracing test
// (otelcol_test.go in this directory); it is a module of its own so that the
// Collector's dependencies stay out of the order system's module.
//
//	go build -o ../../bin/ordercast-otelcol . && ../../bin/ordercast-otelcol --config file:config.yaml
//
// The flags are the Collector's (otelcol.NewCommand): --config (a path or
// a file: URI), --set, and the subcommands validate and components.
package main

import (
	"fmt"
	"os"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func factories() (otelcol.Factories, error) {
	var f otelcol.Factories
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory(), debugexporter.NewFactory()); err != nil {
		return f, err
	}
	f.Telemetry = otelconftelemetry.NewFactory()
	return f, nil
}

// settings are the Collector's: factories, and configuration from files
// (file: URIs, the default scheme of a bare path).
func settings() otelcol.CollectorSettings {
	return otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "ordercast-otelcol", Description: "OpenTelemetry Collector for the order system's tests", Version: "v0.161.0"},
		Factories: factories,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: confmap.ResolverSettings{
			ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
			DefaultScheme:     "file",
		}},
	}
}

func main() {
	if err := otelcol.NewCommand(settings()).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ordercast-otelcol:", err)
		os.Exit(1)
	}
}
