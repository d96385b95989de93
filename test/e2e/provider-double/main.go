// Command pulumi-resource-kubernetes (test double) is a stand-in for the Pulumi Kubernetes
// provider plugin, used by the end-to-end tier only when the real plugin is not available
// (the Go module proxy refuses github.com/pulumi/pulumi-kubernetes; docs/e2e.md).
//
// It speaks the real provider protocol (gRPC, pulumirpc.ResourceProvider) to the real Pulumi
// engine and does real work against real API servers:
//
//   - `pulumi:providers:kubernetes`: `kubeconfig` (contents or a path);
//   - every `kubernetes:<group>/<version>:<Kind>` resource: server-side apply with a field
//     manager, read, delete (waiting until the object is gone); Deployments are awaited until
//     Available and Namespaces until Active, as the real provider does;
//   - `kubernetes:helm.sh/v3:Release` from a local chart archive: install, upgrade, uninstall
//     and status through the Helm library (the same library the real provider embeds), so a
//     crash during an install leaves the same `pending-install` release record behind.
//
// A refresh reads every object back as the real provider does: the live object becomes the
// state's outputs (status, server-set fields and all), and the live values of the fields the
// program set become its inputs, so a field edited by hand shows in the next update's diff and
// is applied again, and an object deleted by hand is reported gone. Objects the program only
// reads record their inputs under `__inputs` as the real provider does (readInputs), so each
// refresh changes their recorded state.
//
// What it does not do (the program under test does not rely on it): schema, previews beyond
// echoing inputs, chart repositories, await logic for other kinds, the real provider's
// normalisation of inputs before diffing (it compares inputs key by key).
package main

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

// version is what the npm @pulumi/kubernetes package asks the engine for.
const version = "4.34.2"

func main() {
	err := provider.Main("kubernetes", func(host *provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
		return newProvider(host), nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-resource-kubernetes (test double): %v\n", err)
		os.Exit(1)
	}
}
