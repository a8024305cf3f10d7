// Command reverser-apiserver serves the reverser.dev API: behind
// kube-apiserver as an APIService (the default), or on its own with
// --standalone for local use.
package main

import (
	"os"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"reverser.dev/reverser/pkg/apiserver"
	"reverser.dev/reverser/pkg/version"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	o := apiserver.NewOptions()
	cmd := &cobra.Command{
		Use:   "reverser-apiserver",
		Short: "Serve the reverser.dev API",
		Long: "reverser-apiserver serves the reverser.dev/v1alpha1 API. By default it runs as the backend of an " +
			"APIService and delegates authentication and authorization to kube-apiserver. With --standalone it " +
			"serves on its own, authenticating client certificates from its own CA.",
		SilenceUsage: true,
		Version:      version.Get().String(),
		RunE: func(c *cobra.Command, _ []string) error {
			return o.Run(c.Context())
		},
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	os.Exit(cli.Run(cmd))
}
