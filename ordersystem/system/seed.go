package system

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/replay"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// DefaultOpeningCredit is each known customer's opening wallet balance:
// 2,000.000 GBP. Chosen so that the real data exercises refusals: customers
// whose purchases over the year exceed it (a few hundred of the 4,372) see
// their later payments refused for insufficient credit.
const DefaultOpeningCredit = order.Money(2_000_000)

// Seed fills the catalog (each stock code's most common positive price and
// description) and opens a wallet with openingCredit for each known customer,
// from the Online Retail file at path (replay.ScanCatalog), or from
// DefaultSeed when path is "", when the catalog table is empty. It is a
// no-op on a seeded database, so restarts keep balances; it then logs a
// WARN when path is given (the file is not read) or when openingCredit is
// not what the wallets were opened with (it is not applied).
func Seed(ctx context.Context, db *store.DB, path string, openingCredit order.Money, log *slog.Logger) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM catalog`).Scan(&n); err != nil {
		return fmt.Errorf("seed: count catalog: %w", err)
	}
	if n > 0 {
		if path != "" {
			log.Warn("--seed-data was not read: the catalog is already seeded, and seeding happens only on an empty database (a fresh data directory or --db); the catalog and wallets are kept",
				"file", path, "products", n)
		}
		var opened int64
		err := db.QueryRowContext(ctx, `SELECT opening_milli FROM wallets ORDER BY customer_id LIMIT 1`).Scan(&opened)
		if err == nil && order.Money(opened) != openingCredit {
			log.Warn("--opening-credit was not applied: the wallets were opened when the catalog was seeded, and are kept",
				"opening_credit", openingCredit.String(), "wallets_opened_with", order.Money(opened).String())
		}
		return nil
	}
	start := time.Now()
	var seed *replay.Seed
	var err error
	if path == "" {
		path = "(embedded: the full Online Retail data set)"
		seed, err = DefaultSeed()
	} else {
		seed, err = readSeed(path)
	}
	if err != nil {
		return err
	}
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		ins, err := tx.PrepareContext(ctx, db.Rebind(`INSERT INTO catalog (stock_code, description, unit_price_milli) VALUES (?, ?, ?) ON CONFLICT (stock_code) DO NOTHING`))
		if err != nil {
			return err
		}
		defer ins.Close()
		for _, code := range seed.StockCodes() {
			p := seed.Products[code]
			if _, err := ins.ExecContext(ctx, code, p.Description, int64(p.UnitPrice)); err != nil {
				return fmt.Errorf("catalog %s: %w", code, err)
			}
		}
		w, err := tx.PrepareContext(ctx, db.Rebind(`INSERT INTO wallets (customer_id, opening_milli, balance_milli) VALUES (?, ?, ?) ON CONFLICT (customer_id) DO NOTHING`))
		if err != nil {
			return err
		}
		defer w.Close()
		for _, c := range seed.CustomerIDs() {
			if _, err := w.ExecContext(ctx, c, int64(openingCredit), int64(openingCredit)); err != nil {
				return fmt.Errorf("wallet %s: %w", c, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	log.Info("catalog and wallets seeded", "file", path, "products", len(seed.Products), "wallets", len(seed.Customers), "opening_credit", openingCredit.String(), "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// defaultSeedGz is DefaultSeed, gzip-compressed JSON of a replay.Seed
// (regenerate it with ORDERCAST_UPDATE_SEED=1 go test -run
// TestDefaultSeedMatchesDataSet ./system/ after a change to the data set or
// to replay.ScanCatalog; the test fails until then).
//
//go:embed default_seed.json.gz
var defaultSeedGz []byte

// DefaultSeedFile is the data set DefaultSeed is derived from, relative to
// the repository's root.
const DefaultSeedFile = "data/online-retail/online_retail.csv.gz"

// DefaultSeed returns the catalog and the known customers that
// replay.ScanCatalog derives from the full Online Retail data set
// (DefaultSeedFile), embedded in the binary, so that `ordercast up` needs no
// checkout of the repository. Each call decodes a fresh copy (about 10 ms).
func DefaultSeed() (*replay.Seed, error) {
	zr, err := gzip.NewReader(bytes.NewReader(defaultSeedGz))
	if err != nil {
		return nil, fmt.Errorf("seed: the embedded default seed: %w", err)
	}
	var seed replay.Seed
	if err := json.NewDecoder(zr).Decode(&seed); err != nil {
		return nil, fmt.Errorf("seed: the embedded default seed: %w", err)
	}
	return &seed, nil
}

// readSeed derives the seed from the Online Retail file at path.
func readSeed(path string) (*replay.Seed, error) {
	f, err := replay.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seed: open %s (--seed-data): %w", path, err)
	}
	defer f.Close()
	seed, err := replay.ScanCatalog(f)
	if err != nil {
		return nil, fmt.Errorf("seed: read %s: %w", path, err)
	}
	return seed, nil
}
