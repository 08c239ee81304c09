package main

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The "events" values are what a compression sweep needs: the same bytes
// from the same seed, and text that each codec shrinks severalfold (random
// bytes or letters did not: the producer stored them uncompressed or
// nearly so).
func TestEventValuesCompress(t *testing.T) {
	gen := func() []byte {
		rng := rand.New(rand.NewPCG(7, 8))
		var all []byte
		for i := range 1000 { // about one producer batch
			v := make([]byte, 1024)
			fillEvent(v, rng, i)
			all = append(all, v...)
		}
		return all
	}
	a := gen()
	if !bytes.Equal(a, gen()) {
		t.Fatal("the same seed gave other values")
	}
	if !bytes.HasPrefix(a, []byte(`{"type":"orderPlaced","order_id":"o-00000000-0"`)) {
		t.Fatalf("not an event: %.80s", a)
	}
	for _, c := range []struct {
		name     string
		codec    kgo.CompressionCodec
		min, max float64
	}{
		{"lz4", kgo.Lz4Compression(), 2, 8},
		{"zstd", kgo.ZstdCompression(), 3, 12},
		{"snappy", kgo.SnappyCompression(), 1.8, 8},
	} {
		comp, err := kgo.DefaultCompressor(c.codec)
		if err != nil {
			t.Fatal(err)
		}
		var dst bytes.Buffer
		out, _ := comp.Compress(&dst, a)
		ratio := float64(len(a)) / float64(len(out))
		t.Logf("%s: %.2f", c.name, ratio)
		if ratio < c.min || ratio > c.max {
			t.Errorf("%s compresses the events %.2f-fold, want %.1f-%.1f", c.name, ratio, c.min, c.max)
		}
	}
}
