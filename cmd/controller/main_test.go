package main

import (
	"strings"
	"testing"
	"time"
)

func valid() options {
	return options{leaderElect: true, leaseDuration: 10 * time.Second, renewDeadline: 7 * time.Second, retryPeriod: 2 * time.Second,
		auditAddr: ":9444"}
}

func TestFlagsThatCannotWorkAreRefusedAtStart(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*options)
		want string // "" means valid
	}{
		{"the defaults", func(*options) {}, ""},
		{"as artifacts/deploy runs it", func(o *options) {
			o.auditCASecret, o.auditService, o.auditAdvertise = "reverser-system/reverser-audit-ca", "reverser-system/reverser-audit", "10.0.0.7"
		}, ""},
		{"a CA for no service", func(o *options) { o.auditCASecret = "reverser-system/ca" }, "needs --audit-service"},
		{"two certificates", func(o *options) {
			o.auditCASecret, o.auditService, o.auditAdvertise, o.auditCert = "ns/ca", "ns/audit", "10.0.0.7", "tls.crt"
		}, "keep one"},
		{"no address to publish", func(o *options) { o.auditService = "ns/audit" }, "--audit-advertise-address"},
		{"a loopback address kube-apiserver refuses", func(o *options) {
			o.auditService, o.auditAdvertise = "ns/audit", "127.0.0.1"
		}, "use the Pod IP"},
		{"no port to publish", func(o *options) {
			o.auditService, o.auditAdvertise, o.auditAddr = "ns/audit", "10.0.0.7", ""
		}, "with a port"},
		{"a lease shorter than its renewal", func(o *options) { o.leaseDuration = 5 * time.Second }, "lease duration"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := valid()
			c.set(&o)
			err := o.validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("want an error naming %q, got %v", c.want, err)
			}
		})
	}
}
