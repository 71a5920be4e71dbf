package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Member is one etcd server of a Cluster.
type Member struct {
	Name      string
	Dir       string
	ClientURL url.URL
	PeerURL   url.URL
	e         *embed.Etcd
}

// Running reports whether the member is running.
func (m *Member) Running() bool { return m.e != nil }

// Cluster is a set of in-process etcd servers on loopback ports, each with
// its data in a directory of the test's. Start stops it in t.Cleanup.
type Cluster struct {
	t       testing.TB
	tls     *TLSFiles // clients must use TLS with a client certificate
	quota   int64     // the members' QuotaBackendBytes, 0 for etcd's default
	Members []*Member
	initial string
}

var counter atomic.Uint64

// ShortEnv names the environment variable that, set to "run", keeps the
// etcd tests running under -short: internal/mutate sets it, because its
// runs are -short and the core's mutants that only an etcd test reaches
// (a backend without the directory backend's capabilities) must still be
// killed.
const ShortEnv = "CLAIMSTORE_TEST_ETCD_SHORT"

// LeftOut says why a test that starts etcd is left out, or "" when it
// runs: under -short (a cluster costs seconds to start and elect), unless
// CI is set (CI always runs them) or ShortEnv is "run".
func LeftOut() string {
	if !testing.Short() || os.Getenv("CI") != "" || os.Getenv(ShortEnv) == "run" {
		return ""
	}
	return "-short: the tests on a real etcd cluster are left out (CI runs them; " + ShortEnv + "=run keeps them)"
}

// Start starts an n-member cluster (n = 1 or 3 usually) and waits until it
// serves. It fails the test if it cannot: etcd is linked in, so nothing
// outside the test is needed. Under -short it skips the test instead, as
// LeftOut says; never when CI is set.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return startWith(t, n, nil, 0)
}

// StartQuota starts a single member whose backend may hold only quota
// bytes (etcd's --quota-backend-bytes): writes past it raise the NOSPACE
// alarm, and etcd then refuses every write until an operator frees space
// and disarms it (Fill gets it there).
func StartQuota(t testing.TB, quota int64) *Cluster {
	t.Helper()
	return startWith(t, 1, nil, quota)
}

func startWith(t testing.TB, n int, tlsFiles *TLSFiles, quota int64) *Cluster {
	t.Helper()
	if why := LeftOut(); why != "" {
		t.Skip(why)
	}
	// A port found free can be bound by another process (another test
	// package's cluster, run in parallel) before etcd binds it: a new
	// cluster then starts again on other ports, in other directories.
	// Nothing else is retried.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var c *Cluster
		if c, err = tryStart(t, n, tlsFiles, quota); err == nil {
			t.Cleanup(c.Stop)
			return c
		}
		if !errors.Is(err, syscall.EADDRINUSE) && !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("etcdtest: %v", err)
	return nil
}

// tryStart starts a new cluster; on an error it stops what it started.
func tryStart(t testing.TB, n int, tlsFiles *TLSFiles, quota int64) (*Cluster, error) {
	t.Helper()
	c := &Cluster{t: t, tls: tlsFiles, quota: quota}
	token := fmt.Sprintf("claimstore-test-%d-%d", os.Getpid(), counter.Add(1))
	base := t.TempDir()
	var initial []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(base, fmt.Sprintf("m%d", i))}
		m.ClientURL = url.URL{Scheme: "http", Host: freePort(t)}
		if tlsFiles != nil {
			m.ClientURL.Scheme = "https"
		}
		m.PeerURL = url.URL{Scheme: "http", Host: freePort(t)}
		initial = append(initial, m.Name+"="+m.PeerURL.String())
		c.Members = append(c.Members, m)
	}
	c.initial = strings.Join(initial, ",")
	errs := make(chan error, n)
	for i := range c.Members {
		go func() { errs <- c.start(i, "new", token) }()
	}
	var first error
	for range c.Members {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.Stop()
		return nil, first
	}
	return c, nil
}

// freePort returns a loopback address with a port that was free a moment
// ago, chosen below the kernel's ephemeral range (ip_local_port_range,
// 32768-60999 by default) so that no outgoing connection can be given it
// before etcd binds it, or while a killed member is down before Restart.
// Another listener may still take it; a new cluster then starts again
// (startWith), a restarted member fails loudly rather than silently
// using another server.
func freePort(t testing.TB) string {
	t.Helper()
	for range 1000 {
		port := 10000 + rand.IntN(22000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return l.Addr().String()
	}
	t.Fatalf("etcdtest: no free loopback port between 10000 and 31999")
	return ""
}

func (c *Cluster) start(i int, state, token string) error {
	m := c.Members[i]
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	cfg.ListenClientUrls = []url.URL{m.ClientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.ClientURL}
	cfg.ListenPeerUrls = []url.URL{m.PeerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.PeerURL}
	cfg.InitialCluster = c.initial
	cfg.InitialClusterToken = token
	cfg.ClusterState = state
	// Short raft timers so that elections after a kill take a fraction of
	// a second; fsync stays on: the tests rely on etcd's durability.
	cfg.TickMs = 20
	cfg.ElectionMs = 200
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.QuotaBackendBytes = c.quota
	// bcrypt's least cost (4) for the users of EnableAuth: the default
	// (10) makes each authentication take a fraction of a second, seconds
	// under the race detector on a loaded machine.
	cfg.BcryptCost = 4
	if c.tls != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: c.tls.serverCert, KeyFile: c.tls.serverKey, TrustedCAFile: c.tls.CACert, ClientCertAuth: true}
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start member %s: %w", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("member %s: %w", m.Name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("member %s not ready after 60s", m.Name)
	}
	m.e = e
	return nil
}

// Stop stops every running member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		if m.e != nil {
			m.e.Close()
			m.e = nil
		}
	}
}

// Kill stops member i at once (a hard stop of its raft node: no leadership
// transfer, nothing flushed beyond what etcd already made durable), and
// closes its listeners.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	m := c.Members[i]
	if m.e == nil {
		c.t.Fatalf("etcdtest: member %s is not running", m.Name)
	}
	m.e.Server.HardStop()
	m.e.Close()
	m.e = nil
}

// Restart starts a killed member again on its data directory.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.start(i, "existing", ""); err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
}

// Leader returns the index of the member that is leader now, or -1.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID() {
			return i
		}
	}
	return -1
}

// WaitLeader waits up to 10s for a leader and returns its index.
func (c *Cluster) WaitLeader() int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l >= 0 {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("etcdtest: no leader after 10s")
	return -1
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL.String())
	}
	return out
}

// Hosts returns every member's host:port, as an etcd:// root names them.
func (c *Cluster) Hosts() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL.Host)
	}
	return out
}

// Client returns a client of the cluster (or of the given endpoints),
// closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Prefix returns a key prefix unique to this test, so that tests sharing a
// cluster never see each other's keys.
func Prefix(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/t%d-%s", counter.Add(1), name)
}

// Fill writes filler values under /etcdtest-fill/ until the cluster
// refuses a write for its space quota (a member started by StartQuota):
// the NOSPACE alarm is then raised, and every write is refused until Free.
func (c *Cluster) Fill(t testing.TB) {
	t.Helper()
	cli := c.Client(t)
	value := strings.Repeat("x", 64<<10)
	for i := 0; i < 10000; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("/etcdtest-fill/%08d", i), value)
		cancel()
		if errors.Is(err, rpctypes.ErrNoSpace) {
			return
		}
		if err != nil {
			t.Fatalf("etcdtest: filling the quota: %v", err)
		}
	}
	t.Fatalf("etcdtest: 10000 writes of 64 KiB and no NOSPACE: was the member started with StartQuota?")
}

// Free does what an operator does for a cluster out of space: delete
// what filled it, compact the history, defragment every member, and
// disarm the NOSPACE alarm.
func (c *Cluster) Free(t testing.TB) {
	t.Helper()
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Delete(ctx, "/etcdtest-fill/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("etcdtest: deleting the filler: %v", err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("etcdtest: compacting: %v", err)
	}
	for _, ep := range c.Endpoints() {
		if _, err := cli.Defragment(ctx, ep); err != nil {
			t.Fatalf("etcdtest: defragmenting %s: %v", ep, err)
		}
	}
	// Member 0 and alarm NONE: every alarm, as etcdctl alarm disarm.
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatalf("etcdtest: disarming the alarm: %v", err)
	}
}

// WaitNoLeader waits up to 10s until member i (running) knows no leader,
// as a member left without a quorum comes to after an election timeout.
func (c *Cluster) WaitNoLeader(i int) {
	c.t.Helper()
	m := c.Members[i]
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m.e != nil && m.e.Server.Leader() == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("etcdtest: member %s still has a leader after 10s", m.Name)
}
