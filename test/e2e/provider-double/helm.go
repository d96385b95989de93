package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// restGetter hands Helm the cluster's clients (genericclioptions.RESTClientGetter).
type restGetter struct {
	c         *cluster
	namespace string
}

func (g restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.c.rest), nil }
func (g restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.c.discovery, nil
}
func (g restGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.c.mapper, nil }
func (g restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	cfg, err := clientcmd.Load(g.c.kubeconfig)
	if err != nil {
		return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{})
	}
	overrides := &clientcmd.ConfigOverrides{}
	overrides.Context.Namespace = g.namespace
	return clientcmd.NewDefaultClientConfig(*cfg, overrides)
}

func (c *cluster) helm(namespace string) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	err := cfg.Init(restGetter{c: c, namespace: namespace}, namespace, "secret", func(format string, args ...any) { logf(format, args...) })
	return cfg, err
}

// releaseArgs are the helm.v3.Release inputs the double honours.
type releaseArgs struct {
	name, namespace, chart string
	values                 map[string]any
	skipAwait, skipCrds    bool
	createNamespace        bool
	atomic, cleanupOnFail  bool
	maxHistory             int
	timeout                time.Duration
	description            string
}

func parseRelease(props resource.PropertyMap) (releaseArgs, error) {
	m := props.Mappable()
	str := func(k string) string { s, _ := m[k].(string); return s }
	flag := func(k string) bool { b, _ := m[k].(bool); return b }
	num := func(k string) float64 { f, _ := m[k].(float64); return f }
	a := releaseArgs{
		name: str("name"), namespace: str("namespace"), chart: str("chart"),
		skipAwait: flag("skipAwait"), skipCrds: flag("skipCrds"), createNamespace: flag("createNamespace"),
		atomic: flag("atomic"), cleanupOnFail: flag("cleanupOnFail"), maxHistory: int(num("maxHistory")),
		timeout: time.Duration(num("timeout")) * time.Second, description: str("description"),
	}
	if a.timeout == 0 {
		a.timeout = 300 * time.Second
	}
	if a.namespace == "" {
		a.namespace = "default"
	}
	if values, ok := m["values"].(map[string]any); ok {
		a.values = values
	} else {
		a.values = map[string]any{}
	}
	if a.name == "" {
		return a, errors.New("release: `name` is required by the test double")
	}
	if !strings.HasPrefix(a.chart, "/") && !strings.HasPrefix(a.chart, "./") {
		return a, fmt.Errorf("release %s: chart %q: the test double installs local chart archives only", a.name, a.chart)
	}
	return a, nil
}

func releaseOutputs(inputs resource.PropertyMap, rel *release.Release) resource.PropertyMap {
	outs := inputs.Copy()
	status := map[string]any{
		"name":      rel.Name,
		"namespace": rel.Namespace,
		"revision":  float64(rel.Version),
		"status":    rel.Info.Status.String(),
	}
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		status["chart"] = rel.Chart.Metadata.Name
		status["version"] = rel.Chart.Metadata.Version
		status["appVersion"] = rel.Chart.Metadata.AppVersion
	}
	outs["status"] = resource.NewObjectProperty(resource.NewPropertyMapFromMap(status))
	return outs
}

// prepare parses a release's inputs, loads its chart and a Helm configuration for its namespace.
func (c *cluster) prepare(props resource.PropertyMap) (releaseArgs, *chart.Chart, *action.Configuration, error) {
	a, err := parseRelease(props)
	if err != nil {
		return a, nil, nil, err
	}
	ch, err := loader.Load(a.chart)
	if err != nil {
		return a, nil, nil, fmt.Errorf("release %s: load chart: %w", a.name, err)
	}
	cfg, err := c.helm(a.namespace)
	return a, ch, cfg, err
}

func (c *cluster) installRelease(ctx context.Context, props resource.PropertyMap) (string, resource.PropertyMap, error) {
	a, ch, cfg, err := c.prepare(props)
	if err != nil {
		return "", nil, err
	}
	cfg.Releases.MaxHistory = a.maxHistory
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = a.name, a.namespace
	install.CreateNamespace, install.SkipCRDs = a.createNamespace, a.skipCrds
	install.Wait, install.Timeout, install.Atomic = !a.skipAwait, a.timeout, a.atomic
	install.Description = a.description
	rel, err := install.RunWithContext(ctx, ch, a.values)
	if err != nil {
		return "", nil, fmt.Errorf("release %s/%s: install: %w", a.namespace, a.name, err)
	}
	return a.namespace + "/" + a.name, releaseOutputs(props, rel), nil
}

func (c *cluster) upgradeRelease(ctx context.Context, props resource.PropertyMap) (string, resource.PropertyMap, error) {
	a, ch, cfg, err := c.prepare(props)
	if err != nil {
		return "", nil, err
	}
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace, upgrade.SkipCRDs = a.namespace, a.skipCrds
	upgrade.Wait, upgrade.Timeout, upgrade.Atomic = !a.skipAwait, a.timeout, a.atomic
	upgrade.CleanupOnFail, upgrade.MaxHistory, upgrade.Description = a.cleanupOnFail, a.maxHistory, a.description
	rel, err := upgrade.RunWithContext(ctx, a.name, ch, a.values)
	if err != nil {
		return "", nil, fmt.Errorf("release %s/%s: upgrade: %w", a.namespace, a.name, err)
	}
	return a.namespace + "/" + a.name, releaseOutputs(props, rel), nil
}

func (c *cluster) readRelease(_ context.Context, id string, olds resource.PropertyMap) (resource.PropertyMap, bool, error) {
	namespace, name := splitID(id)
	cfg, err := c.helm(namespace)
	if err != nil {
		return nil, false, err
	}
	rel, err := action.NewGet(cfg).Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if rel.Info.Status == release.StatusUninstalled {
		return nil, false, nil
	}
	return releaseOutputs(olds, rel), true, nil
}

func (c *cluster) uninstallRelease(_ context.Context, id string, olds resource.PropertyMap) error {
	namespace, name := splitID(id)
	cfg, err := c.helm(namespace)
	if err != nil {
		return err
	}
	uninstall := action.NewUninstall(cfg)
	uninstall.Wait = true
	uninstall.Timeout = 5 * time.Minute
	if a, err := parseRelease(olds); err == nil {
		uninstall.Timeout = a.timeout
	}
	_, err = uninstall.Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release %s: uninstall: %w", id, err)
	}
	return nil
}
