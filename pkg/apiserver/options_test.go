package apiserver

import (
	"strings"
	"testing"
)

func TestServingCAFlagsAreRefusedWhenTheyCannotWork(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Options)
		want string // "" means valid
	}{
		{"the in-cluster set", func(o *Options) {
			o.ServingCASecret, o.ServingService, o.APIService = "reverser-system/ca", "reverser-system/reverser-apiserver", "v1alpha1.reverser.dev"
		}, ""},
		{"no service to name", func(o *Options) { o.ServingCASecret = "reverser-system/ca" }, "--serving-service"},
		{"not namespace/name", func(o *Options) {
			o.ServingCASecret, o.ServingService = "ca", "reverser-system/reverser-apiserver"
		}, "--serving-ca-secret"},
		{"two certificates", func(o *Options) {
			o.ServingCASecret, o.ServingService = "ns/ca", "ns/svc"
			o.Recommended.SecureServing.ServerCert.CertKey.CertFile = "tls.crt"
		}, "keep one"},
		{"a bundle without a CA", func(o *Options) { o.APIService = "v1alpha1.reverser.dev" }, "--apiservice needs --serving-ca-secret"},
		{"standalone", func(o *Options) {
			o.ServingCASecret, o.ServingService, o.Standalone = "ns/ca", "ns/svc", true
		}, "--standalone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := NewOptions()
			c.set(o)
			err := o.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("want an error naming %q, got %v", c.want, err)
			}
		})
	}
}
