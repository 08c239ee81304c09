package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordercast/ordercast/ordersystem/replay"
)

func newReplay() *cobra.Command {
	var (
		baseURL      string
		rate         float64
		concurrency  int
		timeout      time.Duration
		maxAttempts  int
		summaryFile  string
		maxRowErrors float64
		auth         devTokens
	)
	cmd := &cobra.Command{
		Use:   "replay FILE",
		Short: "Replay the Online Retail CSV (plain or .gz) into a running checkout, one order per sale invoice",
		Long: `Groups lines by InvoiceNo, sends each sale invoice to POST /orders with the Idempotency-Key
invoice-<InvoiceNo> (so a second replay of the same file creates no new orders), and counts
cancellations, adjustments, write-offs and checkout's rejections by reason. With --auth dev
(or auto, the default, when the key exists) each customer's order carries a development token for that customer, signed by
the key of 'ordercast up' in --data-dir; guest orders carry none.

A request without a usable answer (a network error, no answer within --timeout, a 429 or a 5xx)
is sent again with backoff, up to --max-attempts times; each distinct cause is printed once. If
the first invoice to use up its attempts does so before checkout answered any request, the
replay stops there: nothing is reachable at --url. Exit status 1 then, when invoices could not
be sent, and on SIGINT/SIGTERM (the summary says how far it got; running it again resumes).`,
		Example: `  ordercast replay data/online-retail/online_retail_2010-12-01.csv --url http://127.0.0.1:8080 --rate 200`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if u, err := url.Parse(baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--url %q: want checkout's base URL, such as http://127.0.0.1:8080", baseURL)
			}
			if !(rate >= 0) || math.IsInf(rate, 0) {
				return fmt.Errorf("--rate %v: want a number of orders per second >= 0, such as 50 (0: unlimited)", rate)
			}
			if concurrency < 1 {
				return fmt.Errorf("--concurrency %d: want >= 1", concurrency)
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v: want a positive duration such as 30s (the bound of one request)", timeout)
			}
			if maxAttempts < 1 {
				return fmt.Errorf("--max-attempts %d: want >= 1 (1: no retries)", maxAttempts)
			}
			if !(maxRowErrors >= 0 && maxRowErrors <= 1) {
				return fmt.Errorf("--max-row-errors %v: want a fraction of the data rows from 0 to 1, such as 0.01 (1%%; 0: any malformed row fails the replay)", maxRowErrors)
			}
			if summaryFile != "" {
				if err := checkWritable("summary", summaryFile); err != nil {
					return err
				}
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
			// A file that gives nothing to send fails before anything is
			// sent, not after a replay that "passed".
			if err := replay.Tally(invoices).CheckInput(maxRowErrors); err != nil {
				fmt.Fprint(cmd.ErrOrStderr(), replay.Tally(invoices).String())
				return &exitError{code: 1, msg: inputErrorMsg(args[0], err)}
			}
			tokens, err := auth.tokens(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			parent := cmd.Context()
			if parent == nil {
				parent = context.Background()
			}
			ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			stderr := cmd.ErrOrStderr()
			sum, err := replay.Run(ctx, invoices, replay.Options{BaseURL: baseURL, Rate: rate, Concurrency: concurrency,
				AttemptTimeout: timeout, MaxAttempts: maxAttempts, Progress: stderr, Token: tokens})
			fmt.Fprint(stderr, sum.String())
			if summaryFile != "" {
				b, _ := json.MarshalIndent(sum, "", "  ")
				if werr := os.WriteFile(summaryFile, b, 0o644); werr != nil {
					return werr
				}
			}
			var unreachable *replay.UnreachableError
			var notCheckout *replay.NotCheckoutError
			switch {
			case errors.As(err, &notCheckout):
				return fmt.Errorf("%w: is --url checkout's base URL (the --http address of 'ordercast up' or 'ordercast run checkout')?", err)
			case errors.As(err, &unreachable):
				hint := "is checkout running there? (--url)"
				if strings.HasPrefix(unreachable.Cause, "no answer within") {
					hint = "is checkout running there (--url), and does it answer within --timeout?"
				}
				return fmt.Errorf("%w: %s", err, hint)
			case err != nil && ctx.Err() != nil:
				return &exitError{code: 1, msg: "replay " + interrupted(ctx, sum)}
			case err != nil:
				return err
			case sum.Failed > 0:
				return &exitError{code: 1, msg: fmt.Sprintf("%d invoices could not be sent", sum.Failed)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&baseURL, "url", "http://127.0.0.1:8080", "checkout base URL")
	fl.Float64Var(&rate, "rate", 0, "orders per second (0: unlimited)")
	fl.IntVar(&concurrency, "concurrency", 8, "requests in flight")
	fl.DurationVar(&timeout, "timeout", replay.DefaultAttemptTimeout, "bound of one request (connect, send, answer); a request without an answer by then is retried")
	fl.IntVar(&maxAttempts, "max-attempts", replay.DefaultMaxAttempts, "attempts per invoice, the first included, before it counts as failed")
	fl.StringVar(&summaryFile, "summary", "", "also write the JSON summary to this file (checked for writing at start)")
	auth.register(fl)
	fl.Float64Var(&maxRowErrors, "max-row-errors", replay.DefaultMaxRowErrorRate, "fraction of the file's data rows that may be malformed (0.01: 1%; 0: none) before the replay fails without sending anything; a file with no sale invoice fails too")
	return cmd
}

// interrupted says that a replay was stopped by a signal and how far it got.
func interrupted(ctx context.Context, sum replay.Summary) string {
	why := "interrupted" + signalNote(ctx)
	done := sum.OrdersAccepted + sum.RejectedTotal() + sum.Failed
	return fmt.Sprintf("%s after %d of %d sales (%d accepted, %d rejected, %d failed, %d not sent); the same command again resumes: re-sent invoices get their first answer (same Idempotency-Key)",
		why, done, sum.Sales, sum.OrdersAccepted, sum.RejectedTotal(), sum.Failed, sum.Unfinished)
}

// inputErrorMsg is the exit message of a replay refused by
// replay.Summary.CheckInput.
func inputErrorMsg(file string, err error) string {
	msg := fmt.Sprintf("replay %s failed: %s; nothing was sent", file, strings.TrimPrefix(err.Error(), "replay: "))
	var ie *replay.InputError
	if errors.As(err, &ie) && ie.RowErrors > 0 {
		msg += " (is it the Online Retail CSV, with its header InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country? --max-row-errors sets the fraction allowed)"
	}
	return msg
}

// checkWritable fails, naming --flag, if path cannot be created or written,
// so that an output file is found wrong at start, not after the run. It
// leaves an existing file as it was and removes the one it created.
func checkWritable(flag, path string) error {
	if path == "-" {
		return nil
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("--%s %s: cannot be written: %w", flag, path, err)
	}
	f.Close()
	if os.IsNotExist(statErr) {
		os.Remove(path)
	}
	return nil
}
