package system

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/store"
)

// TestDefaultSeedMatchesDataSet: the seed embedded in the binary is what
// replay.ScanCatalog derives from the full data set, so `up` without
// --seed-data seeds what `up --seed-data data/online-retail/...` did.
// ORDERCAST_UPDATE_SEED=1 rewrites it.
func TestDefaultSeedMatchesDataSet(t *testing.T) {
	want, err := readSeed(filepath.Join("../..", DefaultSeedFile))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("ORDERCAST_UPDATE_SEED") == "1" {
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		if err := os.WriteFile("default_seed.json.gz", buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote default_seed.json.gz: %d products, %d customers, %d bytes", len(want.Products), len(want.Customers), buf.Len())
		return
	}
	got, err := DefaultSeed()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Products, want.Products) || !reflect.DeepEqual(got.Customers, want.Customers) {
		t.Fatalf("the embedded seed (%d products, %d customers) is not ScanCatalog of %s (%d, %d): regenerate it with ORDERCAST_UPDATE_SEED=1 go test -run TestDefaultSeedMatchesDataSet ./system/",
			len(got.Products), len(got.Customers), DefaultSeedFile, len(want.Products), len(want.Customers))
	}
}

// TestSeedWithoutFile: with no seed file, the catalog and wallets come
// from the binary, from any working directory.
func TestSeedWithoutFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir) // no repository here
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := Seed(ctx, db, "", DefaultOpeningCredit, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	seed, err := DefaultSeed()
	if err != nil {
		t.Fatal(err)
	}
	var products, wallets int
	db.QueryRowContext(ctx, `SELECT COUNT(*) FROM catalog`).Scan(&products)
	db.QueryRowContext(ctx, `SELECT COUNT(*) FROM wallets`).Scan(&wallets)
	if products != len(seed.Products) || wallets != len(seed.Customers) || products < 3000 || wallets < 4000 {
		t.Errorf("seeded %d products and %d wallets, want %d and %d", products, wallets, len(seed.Products), len(seed.Customers))
	}
}

// TestSeedOnSeededDatabaseWarns: on a seeded database Seed reads no file and
// changes nothing, and says so: a WARN names the seed file that was not
// read, and an opening credit other than the wallets' that was not applied.
func TestSeedOnSeededDatabaseWarns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	const oneDay = "../../data/online-retail/online_retail_2010-12-01.csv"
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := Seed(ctx, db, oneDay, DefaultOpeningCredit, log); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 0 {
		t.Fatalf("seeding an empty database warned: %s", logs.String())
	}
	// Again, as on a restart with the same flags: nothing to say.
	if err := Seed(ctx, db, "", DefaultOpeningCredit, log); err != nil || logs.Len() != 0 {
		t.Fatalf("restart without --seed-data: %v, %s", err, logs.String())
	}
	bad := filepath.Join(dir, "other.csv")
	if err := os.WriteFile(bad, []byte("not a csv\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Seed(ctx, db, bad, DefaultOpeningCredit+1000, log); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"level=WARN", "--seed-data was not read", "already seeded", bad, "--opening-credit was not applied", "opening_credit=2001", "wallets_opened_with=2000"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}
