package ctxtime

import (
	"context"
	"testing"
	"time"
)

func TestSleepWholeDuration(t *testing.T) {
	start := time.Now()
	if !Sleep(context.Background(), 20*time.Millisecond) {
		t.Fatal("Sleep with a live context reported false")
	}
	if got := time.Since(start); got < 20*time.Millisecond {
		t.Fatalf("Sleep returned after %v, before the 20ms asked", got)
	}
}

func TestSleepCutShortByContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported the whole hour although its context was cancelled")
	}
}

func TestSleepNonPositive(t *testing.T) {
	if !Sleep(context.Background(), 0) {
		t.Fatal("Sleep(0) with a live context reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, -time.Second) {
		t.Fatal("Sleep(-1s) with a done context reported true")
	}
}
