package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericadmission "k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"reverser.dev/reverser/pkg/admit"
	"reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/openapi"
	"reverser.dev/reverser/pkg/pki"
	"reverser.dev/reverser/pkg/resolve"
	"reverser.dev/reverser/pkg/servingcert"
	"reverser.dev/reverser/pkg/tenancy"
)

// EtcdPrefix is where our objects live in etcd.
const EtcdPrefix = "/registry/reverser.dev"

// Options are the flags of reverser-apiserver.
type Options struct {
	Recommended *genericoptions.RecommendedOptions

	// Standalone serves without a kube-apiserver: client certificates signed
	// by our own CA authenticate, and only system:masters is authorized.
	Standalone bool
	// WriteKubeconfig, in standalone mode, is where the admin kubeconfig goes.
	WriteKubeconfig string
	// EmbeddedEtcdDir holds the embedded etcd's data when no --etcd-servers is given.
	EmbeddedEtcdDir string

	// ServingCASecret ("namespace/name") makes the server issue its own
	// serving certificate from a CA kept in that Secret, for the DNS names
	// of ServingService, and keep the CA in APIService's caBundle: TLS
	// without cert-manager (package servingcert).
	ServingCASecret string
	ServingService  string
	APIService      string

	// Authorizer, when set, replaces the configured authorizer. Tests use it
	// to stand in for kube-apiserver's RBAC.
	Authorizer authorizer.Authorizer

	flags  *pflag.FlagSet
	etcd   *EmbeddedEtcd
	pki    *PKI
	bundle *servingcert.Bundle
	leaf   *servingcert.Leaf
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{
		Recommended:     genericoptions.NewRecommendedOptions(EtcdPrefix, Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)),
		EmbeddedEtcdDir: filepath.Join("reverser-data", "etcd"),
	}
	o.Recommended.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(v1alpha1.SchemeGroupVersion,
		schema.GroupKind{Group: v1alpha1.GroupName})
	o.Recommended.SecureServing.BindPort = 8443
	o.Recommended.SecureServing.ServerCert.CertDirectory = filepath.Join("reverser-data", "pki")
	return o
}

// AddFlags registers every flag on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.flags = fs
	o.Recommended.AddFlags(fs)
	fs.BoolVar(&o.Standalone, "standalone", o.Standalone,
		"Serve without a kube-apiserver: authenticate client certificates signed by a CA kept in --cert-dir, "+
			"authorize only system:masters, and listen on 127.0.0.1 unless --bind-address says otherwise.")
	fs.StringVar(&o.WriteKubeconfig, "write-kubeconfig", o.WriteKubeconfig,
		"With --standalone, write an admin kubeconfig for this server to this path.")
	fs.StringVar(&o.EmbeddedEtcdDir, "embedded-etcd-dir", o.EmbeddedEtcdDir,
		"Data directory of the embedded etcd, used when --etcd-servers is empty. Data survives restarts.")
	fs.StringVar(&o.ServingCASecret, "serving-ca-secret", o.ServingCASecret,
		"Secret (namespace/name) holding the CA this server issues its serving certificate from; created by the first replica. "+
			"With it the server needs no --tls-cert-file and no cert-manager.")
	fs.StringVar(&o.ServingService, "serving-service", o.ServingService,
		"Service (namespace/name) the serving certificate is issued for, with --serving-ca-secret: its in-cluster DNS names.")
	fs.StringVar(&o.APIService, "apiservice", o.APIService,
		"APIService whose spec.caBundle the server keeps equal to the --serving-ca-secret CA, so the aggregator trusts it; "+
			"empty leaves caBundle to someone else.")
}

// Validate checks the flags that are ours; Config validates the rest.
func (o *Options) Validate() error {
	var errs []error
	if o.WriteKubeconfig != "" && !o.Standalone {
		errs = append(errs, errors.New("--write-kubeconfig needs --standalone: in delegated mode kube-apiserver authenticates users"))
	}
	if o.ServingCASecret != "" {
		if _, _, err := servingcert.ParseRef(o.ServingCASecret); err != nil {
			errs = append(errs, fmt.Errorf("--serving-ca-secret: %w", err))
		}
		if _, _, err := servingcert.ParseRef(o.ServingService); err != nil {
			errs = append(errs, fmt.Errorf("--serving-service (needed by --serving-ca-secret): %w", err))
		}
		if o.Recommended.SecureServing.ServerCert.CertKey.CertFile != "" {
			errs = append(errs, errors.New("--serving-ca-secret and --tls-cert-file both name a serving certificate: keep one"))
		}
		if o.Standalone {
			errs = append(errs, errors.New("--serving-ca-secret needs a cluster: not with --standalone"))
		}
	} else if o.APIService != "" {
		errs = append(errs, errors.New("--apiservice needs --serving-ca-secret: it writes that CA"))
	}
	if len(o.Recommended.Etcd.StorageConfig.Transport.ServerList) == 0 && o.EmbeddedEtcdDir == "" {
		errs = append(errs, errors.New("set --etcd-servers or --embedded-etcd-dir"))
	}
	return utilerrors.NewAggregate(errs)
}

// Config starts the embedded etcd if needed and builds the server config.
// Call Close when done with it.
func (o *Options) Config() (*Config, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(o.Recommended.Etcd.StorageConfig.Transport.ServerList) == 0 {
		if err := os.MkdirAll(o.EmbeddedEtcdDir, 0o700); err != nil {
			return nil, fmt.Errorf("creating --embedded-etcd-dir: %w", err)
		}
		e, err := StartEmbeddedEtcd(o.EmbeddedEtcdDir)
		if err != nil {
			return nil, err
		}
		o.etcd = e
		o.Recommended.Etcd.StorageConfig.Transport.ServerList = []string{e.Endpoint}
		klog.InfoS("Started embedded etcd", "dir", o.EmbeddedEtcdDir, "endpoint", e.Endpoint)
	}
	cfg, err := o.config()
	if err != nil {
		o.Close()
		return nil, err
	}
	return cfg, nil
}

func (o *Options) config() (*Config, error) {
	if o.Standalone {
		if err := o.prepareStandalone(); err != nil {
			return nil, err
		}
	} else if o.ServingCASecret != "" {
		if err := o.prepareServingCert(); err != nil {
			return nil, err
		}
	} else if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil,
		[]net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed serving certificate: %w", err)
	}
	if errs := o.Recommended.Validate(); len(errs) > 0 {
		return nil, utilerrors.NewAggregate(errs)
	}

	sc := genericapiserver.NewRecommendedConfig(Codecs)
	sc.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	sc.FeatureGate = utilfeature.DefaultFeatureGate
	namer := openapinamer.NewDefinitionNamer(Scheme)
	sc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	sc.OpenAPIConfig.Info.Title = "reverser.dev"
	sc.OpenAPIConfig.Info.Version = v1alpha1.SchemeGroupVersion.Version
	sc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	sc.OpenAPIV3Config.Info.Title = "reverser.dev"
	sc.OpenAPIV3Config.Info.Version = v1alpha1.SchemeGroupVersion.Version
	if err := o.Recommended.ApplyTo(sc); err != nil {
		return nil, fmt.Errorf("applying options: %w", err)
	}
	if o.Authorizer != nil {
		sc.Authorization.Authorizer = o.Authorizer
	}

	var nsLabels tenancy.NamespaceLabels
	var served admit.Served
	if sc.ClientConfig != nil {
		kube, err := kubernetes.NewForConfig(sc.ClientConfig)
		if err != nil {
			return nil, fmt.Errorf("building kube-apiserver client: %w", err)
		}
		nsLabels = func(ctx context.Context, name string) (labels.Set, error) {
			ns, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return ns.Labels, nil
		}
		served = admit.CachedServed(30*time.Second, func(context.Context) (resolve.Served, error) {
			groups, lists, err := kube.Discovery().ServerGroupsAndResources()
			if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
				return resolve.Served{}, err
			}
			return resolve.NewServed(groups, lists), nil
		})
	}
	save := admit.NewSave(sc.Authorization.Authorizer, nsLabels)
	rules := admit.NewRules(sc.Authorization.Authorizer, served)
	claims := admit.NewClaims(sc.Authorization.Authorizer)
	credentials := admit.NewCredentials(sc.Authorization.Authorizer)
	for _, p := range []genericadmission.InitializationValidator{save, rules, claims, credentials} {
		if err := p.ValidateInitialization(); err != nil {
			return nil, err
		}
	}
	ours := genericadmission.NewChainHandler(save, rules, claims, credentials)
	if sc.AdmissionControl == nil {
		sc.AdmissionControl = ours
	} else {
		sc.AdmissionControl = genericadmission.NewChainHandler(sc.AdmissionControl, ours)
	}

	if o.Standalone && o.WriteKubeconfig != "" {
		if err := o.writeAdminKubeconfig(sc.SecureServing.Listener.Addr()); err != nil {
			return nil, err
		}
	}
	return &Config{GenericConfig: sc, Save: save, Rules: rules, Claims: claims}, nil
}

// prepareStandalone turns the delegating options into a self-contained
// secure server: no kube-apiserver is asked anything.
func (o *Options) prepareStandalone() error {
	p, err := EnsurePKI(o.Recommended.SecureServing.ServerCert.CertDirectory)
	if err != nil {
		return fmt.Errorf("preparing standalone PKI: %w", err)
	}
	o.pki = p
	ss := o.Recommended.SecureServing
	if o.flags == nil || !o.flags.Changed("bind-address") {
		ss.BindAddress = netutils.ParseIPSloppy("127.0.0.1")
	}
	ss.ServerCert.CertKey.CertFile, ss.ServerCert.CertKey.KeyFile = p.ServingFiles()

	authn := o.Recommended.Authentication
	authn.RemoteKubeConfigFileOptional = true
	authn.SkipInClusterLookup = true
	authn.ClientCert.ClientCA = p.CAFile()
	o.Recommended.Authorization.RemoteKubeConfigFileOptional = true
	o.Recommended.CoreAPI = nil
	o.Recommended.Admission = nil
	o.Recommended.Features.EnablePriorityAndFairness = false
	return nil
}

func (o *Options) writeAdminKubeconfig(addr net.Addr) error {
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return fmt.Errorf("reading serving port: %w", err)
	}
	host := "127.0.0.1"
	if ip := o.Recommended.SecureServing.BindAddress; ip != nil && !ip.IsUnspecified() {
		host = ip.String()
	}
	certFile, keyFile := o.pki.AdminFiles()
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("reading admin certificate: %w", err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("reading admin key: %w", err)
	}
	server := "https://" + net.JoinHostPort(host, port)
	if err := pki.WriteKubeconfig(o.WriteKubeconfig, server, o.pki.CA.CertPEM, pki.Credentials{CertPEM: cert, KeyPEM: key}); err != nil {
		return err
	}
	klog.InfoS("Wrote admin kubeconfig", "path", o.WriteKubeconfig, "server", server, "user", AdminUser)
	return nil
}

// PKI returns the standalone PKI, or nil in delegated mode.
func (o *Options) PKI() *PKI { return o.pki }

// Close stops the embedded etcd, if this process started one.
func (o *Options) Close() {
	if o.etcd != nil {
		o.etcd.Close()
		o.etcd = nil
	}
}

// Run serves until ctx is done.
func (o *Options) Run(ctx context.Context) error {
	defer o.Close()
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	srv, err := cfg.New()
	if err != nil {
		return err
	}
	if o.leaf != nil {
		// For the server's life: a caBundle someone overwrote is healed
		// and the leaf renewed before it expires.
		go servingcert.Keep(ctx, o.bundle, o.leaf, time.Minute)
	}
	return srv.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// prepareServingCert issues the serving certificate from the CA Secret, so
// the server needs no certificate handed to it.
func (o *Options) prepareServingCert() error {
	cfg, err := o.coreConfig()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building kube-apiserver client: %w", err)
	}
	ns, name, _ := servingcert.ParseRef(o.ServingCASecret)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, err := servingcert.LoadOrCreateCA(ctx, kube.CoreV1().Secrets(ns), name)
	if err != nil {
		return err
	}
	svcNS, svc, _ := servingcert.ParseRef(o.ServingService)
	o.leaf = &servingcert.Leaf{CA: ca, Dir: o.Recommended.SecureServing.ServerCert.CertDirectory, Name: "serving",
		DNSNames: servingcert.ServiceNames(svcNS, svc), Renew: 90 * 24 * time.Hour}
	if _, err := o.leaf.Ensure(time.Now()); err != nil {
		return err
	}
	ck := &o.Recommended.SecureServing.ServerCert.CertKey
	ck.CertFile, ck.KeyFile = o.leaf.Files()
	if o.APIService != "" {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("building kube-apiserver client: %w", err)
		}
		o.bundle = &servingcert.Bundle{Client: dyn, APIService: o.APIService, CAPEM: ca.CertPEM}
	}
	return nil
}

// coreConfig is how this server reaches kube-apiserver: --kubeconfig, or
// the Pod's service account.
func (o *Options) coreConfig() (*rest.Config, error) {
	if o.Recommended.CoreAPI != nil && o.Recommended.CoreAPI.CoreAPIKubeconfigPath != "" {
		return clientcmd.BuildConfigFromFlags("", o.Recommended.CoreAPI.CoreAPIKubeconfigPath)
	}
	return rest.InClusterConfig()
}
