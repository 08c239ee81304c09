package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ordercast/ordercast/replay"
)

func newReplay() *cobra.Command {
	var (
		url         string
		rate        float64
		concurrency int
		summaryFile string
	)
	cmd := &cobra.Command{
		Use:   "replay FILE",
		Short: "Replay the Online Retail CSV (plain or .gz) into a running checkout, one order per sale invoice",
		Long: `Groups lines by InvoiceNo, sends each sale invoice to POST /orders with the Idempotency-Key
invoice-<InvoiceNo> (so a second replay of the same file creates no new orders), and counts
cancellations, adjustments, write-offs and checkout's rejections by reason.`,
		Example: `  ordercast replay data/online-retail/online_retail_2010-12-01.csv --url http://127.0.0.1:8080 --rate 200`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rate < 0 {
				return fmt.Errorf("--rate %v: want >= 0 orders per second (0: unlimited)", rate)
			}
			if concurrency < 1 {
				return fmt.Errorf("--concurrency %d: want >= 1", concurrency)
			}
			rc, err := replay.Open(args[0])
			if err != nil {
				return err
			}
			invoices, err := replay.ReadInvoices(rc)
			rc.Close()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			sum, err := replay.Run(ctx, invoices, replay.Options{BaseURL: url, Rate: rate, Concurrency: concurrency, Progress: os.Stderr})
			fmt.Fprintln(os.Stderr, sum.String())
			if summaryFile != "" {
				b, _ := json.MarshalIndent(sum, "", "  ")
				if werr := os.WriteFile(summaryFile, b, 0o644); werr != nil {
					return werr
				}
			}
			if err != nil {
				return err
			}
			if sum.Failed > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%d invoices could not be sent", sum.Failed)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080", "checkout base URL")
	cmd.Flags().Float64Var(&rate, "rate", 0, "orders per second (0: unlimited)")
	cmd.Flags().IntVar(&concurrency, "concurrency", 8, "requests in flight")
	cmd.Flags().StringVar(&summaryFile, "summary", "", "also write the JSON summary to this file")
	return cmd
}
