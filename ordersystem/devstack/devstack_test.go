package devstack

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataDirIsExclusive: a second stack on the same data directory is
// refused with an error naming the directory, and the directory is usable
// again once the first stack is closed.
func TestDataDirIsExclusive(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"}
	first, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Start on %s: err %v, want an 'in use' error", dir, err)
	}
	first.Close()
	again, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start after Close: %v", err)
	}
	again.Close()
}

// TestListenErrors: an address that is taken is "not free"; one that cannot
// be listened on for another reason (not an address of this host) says so
// instead, naming the flag.
func TestListenErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, c := range []struct {
		cfg  Config
		want []string
	}{
		{Config{BrokerAddr: ln.Addr().String(), RegistryAddr: "127.0.0.1:0"}, []string{"not free", "--broker-addr"}},
		{Config{BrokerAddr: "127.0.0.1:0", RegistryAddr: ln.Addr().String()}, []string{"not free", "--registry-addr"}},
		{Config{BrokerAddr: "192.0.2.1:0", RegistryAddr: "127.0.0.1:0", AllowRemote: true}, []string{"cannot listen there", "--broker-addr"}},
		{Config{BrokerAddr: "127.0.0.1:0", RegistryAddr: "192.0.2.1:0", AllowRemote: true}, []string{"cannot listen there", "--registry-addr"}},
	} {
		c.cfg.DataDir = t.TempDir()
		st, err := Start(c.cfg)
		if err == nil {
			st.Close()
			t.Errorf("%+v: started", c.cfg)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v; want %q in it", c.cfg, err, w)
			}
		}
	}
}

// TestUncleanStopIsReported: a stack that did not stop through Close (its
// process was killed: here its lock is released and its broker closed
// without Close) leaves Unclean set for the next one; a clean Close does
// not.
func TestUncleanStopIsReported(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"}
	first, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if first.Unclean {
		t.Fatal("a fresh data directory reported as unclean")
	}
	_ = first.srv.Close()
	first.Cluster.Close()
	first.lock.Close() // as the kernel does for a killed process
	second, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Unclean {
		t.Error("Start after a kill: Unclean is false")
	}
	second.Close()
	third, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if third.Unclean {
		t.Error("Start after a clean Close: Unclean is true")
	}
}

// TestFailedStartIsNotUnclean: a start that fails (a port taken, a corrupt
// registry.json) is not taken for a killed stack by the next start on the
// data directory, and does not hide one that was killed before it.
func TestFailedStartIsNotUnclean(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free := Config{BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"}
	for _, c := range []struct {
		name  string
		fail  Config
		setup func(dir string)
	}{
		{"broker address taken", Config{BrokerAddr: taken.Addr().String(), RegistryAddr: "127.0.0.1:0"}, nil},
		{"registry address taken", Config{BrokerAddr: "127.0.0.1:0", RegistryAddr: taken.Addr().String()}, nil},
		{"corrupt registry.json", free, func(dir string) {
			if err := os.WriteFile(filepath.Join(dir, "registry.json"), []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, killedBefore := range []bool{false, true} {
			dir := t.TempDir()
			if killedBefore {
				// As a killed stack leaves it.
				if err := os.WriteFile(filepath.Join(dir, runningFile), []byte("pid 1\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if c.setup != nil {
				c.setup(dir)
			}
			cfg := c.fail
			cfg.DataDir = dir
			if st, err := Start(cfg); err == nil {
				st.Close()
				t.Fatalf("%s: started", c.name)
			}
			os.Remove(filepath.Join(dir, "registry.json"))
			ok := free
			ok.DataDir = dir
			st, err := Start(ok)
			if err != nil {
				t.Fatalf("%s: Start after the failed one: %v", c.name, err)
			}
			if st.Unclean != killedBefore {
				t.Errorf("%s (killed before it: %v): the next start has Unclean %v", c.name, killedBefore, st.Unclean)
			}
			st.Close()
		}
	}
}
