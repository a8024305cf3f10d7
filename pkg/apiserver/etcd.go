package apiserver

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// EmbeddedEtcd is an etcd server running inside this process, listening on
// loopback only. It is the default storage: one binary, no other service.
type EmbeddedEtcd struct {
	etcd *embed.Etcd
	// Endpoint is the client URL, e.g. http://127.0.0.1:43117.
	Endpoint string
}

// StartEmbeddedEtcd starts etcd with its data in dir, on random loopback
// ports. Data in dir survives restarts.
func StartEmbeddedEtcd(dir string) (*EmbeddedEtcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "reverser"
	cfg.Dir = dir
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	// Keep history bounded the way kube-apiserver's own etcd does.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s failed: %w", dir, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s did not become ready within 60s", dir)
	}
	return &EmbeddedEtcd{etcd: e, Endpoint: "http://" + e.Clients[0].Addr().String()}, nil
}

// Close stops etcd and waits until its files are released.
func (e *EmbeddedEtcd) Close() {
	e.etcd.Close()
}
