// Command reverser-redis serves an in-memory Redis (miniredis) on loopback
// until it is stopped: the cache Argo CD's application controller and repo
// server require (--redis), on the local control plane, where no
// redis-server is installed. Nothing is persisted; both rebuild the cache
// from the cluster and Git when it is empty.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:6379", "address to listen on, with its port")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := serve(ctx, *listen, func(addr string) { fmt.Printf("reverser-redis: serving on %s\n", addr) }); err != nil {
		fmt.Fprintf(os.Stderr, "reverser-redis: %v\n", err)
		os.Exit(1)
	}
}

// serve runs a Redis server on addr until ctx ends; started is told the
// address it listens on (the port chosen when addr's is 0).
func serve(ctx context.Context, addr string, started func(string)) error {
	s := miniredis.NewMiniRedis()
	if err := s.StartAddr(addr); err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	defer s.Close()
	started(s.Addr())
	<-ctx.Done()
	return nil
}
