// Package apiserver wires reverser-apiserver: the reverser.dev API group on a
// k8s.io/apiserver generic server, its storage (embedded or external etcd),
// the save admission check, and the standalone and delegated modes.
package apiserver

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"reverser.dev/reverser/pkg/admit"
	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/install"
	"reverser.dev/reverser/pkg/registry"
	"reverser.dev/reverser/pkg/registry/argocdclaim"
	"reverser.dev/reverser/pkg/registry/clusterwatchrule"
	"reverser.dev/reverser/pkg/registry/commitrequest"
	"reverser.dev/reverser/pkg/registry/fluxclaim"
	"reverser.dev/reverser/pkg/registry/gitprovider"
	"reverser.dev/reverser/pkg/registry/gittarget"
	"reverser.dev/reverser/pkg/registry/kubeprovider"
	"reverser.dev/reverser/pkg/registry/watchrule"
)

var (
	// Scheme holds the internal and served types of reverser.dev.
	Scheme = runtime.NewScheme()
	// Codecs serializes them.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	install.Install(Scheme)
	// The generic server expects the meta types under an empty group.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}

// Config is a complete server configuration.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	// Save is the admission plugin for CommitRequests, Rules the one for
	// WatchRules and ClusterWatchRules, Claims the one for FluxClaims and
	// ArgoCDClaims; New wires their storage.
	Save   *admit.Save
	Rules  *admit.Rules
	Claims *admit.Claims
}

// Server is a running reverser-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// New builds the server and installs the reverser.dev API group.
func (c *Config) New() (*Server, error) {
	generic, err := c.GenericConfig.Complete().New("reverser-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("building generic server: %w", err)
	}
	storage, err := newStorage(c.GenericConfig.RESTOptionsGetter)
	if err != nil {
		return nil, err
	}
	gitTarget := func(ctx context.Context, namespace, name string) (*reverser.GitTarget, error) {
		obj, err := storage[gittarget.Kind.Resource].(*registry.REST).Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return obj.(*reverser.GitTarget), nil
	}
	c.Save.SetGitTargetGetter(gitTarget)
	remoteProvider := func(ctx context.Context, name string) (bool, error) {
		obj, err := storage[kubeprovider.Kind.Resource].(*registry.REST).Get(ctx, name, &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return !obj.(*reverser.KubeProvider).Spec.InCluster, nil
	}
	c.Rules.SetRemoteSource(func(ctx context.Context, namespace, name string) (bool, error) {
		gt, err := gitTarget(ctx, namespace, name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return remoteProvider(ctx, gt.Spec.KubeProviderRef.Name)
	})
	c.Claims.SetRemoteProvider(remoteProvider)
	c.Save.SetRemoteProvider(remoteProvider)

	group := genericapiserver.NewDefaultAPIGroupInfo(reverser.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	group.NegotiatedSerializer = withoutProtobuf{group.NegotiatedSerializer}
	group.VersionedResourcesStorageMap["v1alpha1"] = storage
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing reverser.dev: %w", err)
	}
	return &Server{GenericAPIServer: generic}, nil
}

// newStorage builds every kind's storage and status subresource.
func newStorage(opts generic.RESTOptionsGetter) (map[string]rest.Storage, error) {
	storage := map[string]rest.Storage{}
	add := func(resource string, main *registry.REST, status *registry.StatusREST, err error) error {
		if err != nil {
			return err
		}
		storage[resource] = main
		storage[resource+"/status"] = status
		return nil
	}
	for _, err := range []error{
		addKind(add, gitprovider.Kind, opts),
		addKind(add, kubeprovider.Kind, opts),
		addKind(add, gittarget.Kind, opts),
		addKind(add, watchrule.Kind, opts),
		addKind(add, clusterwatchrule.Kind, opts),
		addKind(add, commitrequest.Kind, opts),
		addKind(add, fluxclaim.Kind, opts),
		addKind(add, argocdclaim.Kind, opts),
	} {
		if err != nil {
			return nil, err
		}
	}
	return storage, nil
}

func addKind[T registry.Object](add func(string, *registry.REST, *registry.StatusREST, error) error, k *registry.Kind[T],
	opts generic.RESTOptionsGetter) error {
	main, status, err := registry.NewREST(k, Scheme, opts)
	return add(k.Resource, main, status, err)
}

// withoutProtobuf serves our group as JSON, YAML (and CBOR where enabled),
// like a CRD: our types have no protobuf encoding, so offering it would
// fail clients that prefer it, such as kube-controller-manager's namespace
// deleter. Clients listing several types fall back to JSON.
type withoutProtobuf struct {
	runtime.NegotiatedSerializer
}

func (w withoutProtobuf) SupportedMediaTypes() []runtime.SerializerInfo {
	var out []runtime.SerializerInfo
	for _, info := range w.NegotiatedSerializer.SupportedMediaTypes() {
		if info.MediaType != runtime.ContentTypeProtobuf {
			out = append(out, info)
		}
	}
	return out
}
