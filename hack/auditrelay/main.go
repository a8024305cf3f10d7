// Command reverser-auditrelay relays kube-apiserver's audit webhook to
// Reverser's audit ingress over TLS, moving the events' timestamps by the
// skew its control file names (test/auditrelay): the fault suite's clock
// skew between kube-apiserver and the controller.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"reverser.dev/reverser/test/auditrelay"
)

func main() {
	listen := flag.String("listen", "", "address to serve on, with its port")
	upstream := flag.String("upstream", "", "the audit ingress, https://host:port")
	cert := flag.String("tls-cert-file", "", "serving certificate (one kube-apiserver's webhook trusts)")
	key := flag.String("tls-private-key-file", "", "its key")
	ca := flag.String("upstream-ca-file", "", "CA of the audit ingress's certificate")
	control := flag.String("control", "", "file naming the skew, a duration (\"1h\", \"-1h\")")
	flag.Parse()
	if err := run(*listen, *upstream, *cert, *key, *ca, *control); err != nil {
		klog.ErrorS(err, "Relaying")
		os.Exit(1)
	}
}

func run(listen, upstream, cert, key, ca, control string) error {
	if listen == "" || upstream == "" || cert == "" || key == "" || ca == "" || control == "" {
		return errors.New("--listen, --upstream, --tls-cert-file, --tls-private-key-file, --upstream-ca-file and --control are required")
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no certificate", ca)
	}
	client := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	srv := &http.Server{Addr: listen, Handler: &auditrelay.Relay{Upstream: upstream, Client: client, Control: control},
		ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	klog.InfoS("Relaying audit batches", "listen", listen, "upstream", upstream, "control", control)
	if err := srv.ListenAndServeTLS(cert, key); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
