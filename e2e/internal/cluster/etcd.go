package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is a single-member etcd server embedded in the test process
// (go.etcd.io/etcd/server/v3/embed). Its data lives in a temporary directory
// and it listens on random localhost ports. It outlives API server restarts,
// which is what lets a test stop and start the API server over the same
// state.
type Etcd struct {
	endpoint string

	stopOnce sync.Once
	srv      *embed.Etcd
}

// StartEtcd starts an embedded etcd with its data in dir (which must exist
// and be empty) and waits until it serves.
func StartEtcd(dir string) (*Etcd, error) {
	var lastErr error
	// Free ports are picked by listening on port 0 and closing the listener;
	// another process may take one in between, so retry a few times.
	for range 5 {
		e, err := startEtcdOnce(dir)
		if err == nil {
			return e, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startEtcdOnce(dir string) (*Etcd, error) {
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	cu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", clientPort)}
	pu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", peerPort)}

	cfg := embed.NewConfig()
	cfg.Name = "e2e"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// Test data: durability across a machine crash is not needed, and fsync
	// on a loaded machine only makes the test slower.
	cfg.UnsafeNoFsync = true

	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(2 * time.Minute):
		srv.Close()
		return nil, errors.New("etcd did not become ready within 2 minutes")
	}
	return &Etcd{endpoint: cu.String(), srv: srv}, nil
}

// Endpoint returns the client URL, "http://127.0.0.1:<port>".
func (e *Etcd) Endpoint() string { return e.endpoint }

// Stop stops etcd and waits for it to shut down. It is safe to call more
// than once.
func (e *Etcd) Stop() {
	e.stopOnce.Do(func() { e.srv.Close() })
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}
