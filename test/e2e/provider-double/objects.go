package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

const fieldManager = "pulumi-kubernetes"

// cluster is one API server: the clients every operation uses.
type cluster struct {
	kubeconfig []byte
	rest       *rest.Config
	dynamic    dynamic.Interface
	discovery  discovery.CachedDiscoveryInterface
	mapper     *restmapper.DeferredDiscoveryRESTMapper
}

func newCluster(kubeconfig string) (*cluster, error) {
	raw := []byte(kubeconfig)
	if kubeconfig != "" && !strings.Contains(kubeconfig, "apiVersion") {
		data, err := os.ReadFile(kubeconfig)
		if err != nil {
			return nil, err
		}
		raw = data
	}
	if len(raw) == 0 {
		path := os.Getenv("KUBECONFIG")
		if path == "" {
			return nil, fmt.Errorf("no kubeconfig given and KUBECONFIG is not set")
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		raw = data
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cached := memory.NewMemCacheClient(dc)
	return &cluster{kubeconfig: raw, rest: cfg, dynamic: dyn, discovery: cached, mapper: restmapper.NewDeferredDiscoveryRESTMapper(cached)}, nil
}

// toObject turns resource inputs into an object (numbers as JSON numbers).
func toObject(props resource.PropertyMap) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(props.Mappable())
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return obj, nil
}

// toProperties turns a live object into resource outputs; a Secret's data stays secret.
func toProperties(obj *unstructured.Unstructured) (resource.PropertyMap, error) {
	copied := obj.DeepCopy()
	unstructured.RemoveNestedField(copied.Object, "metadata", "managedFields")
	data, err := json.Marshal(copied.Object)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	props := resource.NewPropertyMapFromMap(m)
	if obj.GetKind() == "Secret" && obj.GetAPIVersion() == "v1" {
		for _, k := range []resource.PropertyKey{"data", "stringData"} {
			if v, ok := props[k]; ok {
				props[k] = resource.MakeSecret(v)
			}
		}
	}
	return props, nil
}

// resourceFor finds the API resource of a kind, refreshing discovery once when the kind is new
// (a CRD installed moments ago).
func (c *cluster) resourceFor(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, bool, error) {
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		c.mapper.Reset()
		mapping, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, false, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if namespace == "" {
			namespace = "default"
		}
		return c.dynamic.Resource(mapping.Resource).Namespace(namespace), true, nil
	}
	return c.dynamic.Resource(mapping.Resource), false, nil
}

// gvkOfType reads the group, version and kind from a type token such as
// `kubernetes:apps/v1:Deployment` or `kubernetes:core/v1:Secret`.
func gvkOfType(token string) (schema.GroupVersionKind, error) {
	parts := strings.Split(token, ":")
	if len(parts) != 3 || parts[0] != "kubernetes" {
		return schema.GroupVersionKind{}, fmt.Errorf("unsupported resource type %q", token)
	}
	gv := strings.SplitN(parts[1], "/", 2)
	if len(gv) != 2 {
		return schema.GroupVersionKind{}, fmt.Errorf("unsupported resource type %q", token)
	}
	group := gv[0]
	if group == "core" {
		group = ""
	}
	return schema.GroupVersionKind{Group: group, Version: gv[1], Kind: parts[2]}, nil
}

func splitID(id string) (namespace, name string) {
	if i := strings.Index(id, "/"); i >= 0 {
		return id[:i], id[i+1:]
	}
	return "", id
}

// applyObject creates or updates an object with server-side apply and waits until it is ready.
func (c *cluster) applyObject(ctx context.Context, props resource.PropertyMap) (string, resource.PropertyMap, error) {
	obj, err := toObject(props)
	if err != nil {
		return "", nil, err
	}
	ri, namespaced, err := c.resourceFor(obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return "", nil, err
	}
	if namespaced && obj.GetNamespace() == "" {
		obj.SetNamespace("default")
	}
	body, err := json.Marshal(obj.Object)
	if err != nil {
		return "", nil, err
	}
	force := true
	live, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: fieldManager, Force: &force})
	if err != nil {
		return "", nil, fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	if live, err = c.await(ctx, ri, live); err != nil {
		return "", nil, err
	}
	id := live.GetName()
	if namespaced {
		id = live.GetNamespace() + "/" + live.GetName()
	}
	outs, err := toProperties(live)
	return id, outs, err
}

// await waits for the kinds the real provider waits for: a Deployment until it is Available
// with every replica updated, a Namespace until it is Active.
func (c *cluster) await(ctx context.Context, ri dynamic.ResourceInterface, live *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	if live.GetAnnotations()["pulumi.com/skipAwait"] == "true" {
		return live, nil
	}
	var ready func(*unstructured.Unstructured) (bool, string)
	switch live.GetAPIVersion() + "/" + live.GetKind() {
	case "apps/v1/Deployment":
		ready = deploymentReady
	case "v1/Namespace":
		ready = func(o *unstructured.Unstructured) (bool, string) {
			phase, _, _ := unstructured.NestedString(o.Object, "status", "phase")
			return phase == "Active", "phase " + phase
		}
	default:
		return live, nil
	}
	last := ""
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		current, err := ri.Get(ctx, live.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		live = current
		ok, why := ready(current)
		last = why
		return ok, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s not ready (%s): %w", live.GetKind(), live.GetNamespace(), live.GetName(), last, err)
	}
	return live, nil
}

func deploymentReady(o *unstructured.Unstructured) (bool, string) {
	generation := o.GetGeneration()
	observed, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
	if observed < generation {
		return false, "generation not observed yet"
	}
	replicas, found, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}
	updated, _, _ := unstructured.NestedInt64(o.Object, "status", "updatedReplicas")
	if updated < replicas {
		return false, fmt.Sprintf("%d of %d replicas updated", updated, replicas)
	}
	conditions, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, cond := range conditions {
		m, ok := cond.(map[string]any)
		if ok && m["type"] == "Available" && m["status"] == "True" {
			return true, "available"
		}
	}
	return false, "not Available"
}

func (c *cluster) readObject(ctx context.Context, token, id string) (resource.PropertyMap, bool, error) {
	gvk, err := gvkOfType(token)
	if err != nil {
		return nil, false, err
	}
	namespace, name := splitID(id)
	ri, _, err := c.resourceFor(gvk, namespace)
	if err != nil {
		return nil, false, err
	}
	live, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	outs, err := toProperties(live)
	return outs, true, err
}

// deleteObject deletes an object and waits until it is gone (a Namespace until the namespace
// controller has emptied it).
func (c *cluster) deleteObject(ctx context.Context, token, id string) error {
	gvk, err := gvkOfType(token)
	if err != nil {
		return err
	}
	namespace, name := splitID(id)
	ri, _, err := c.resourceFor(gvk, namespace)
	if meta.IsNoMatchError(err) {
		return nil // the kind (a CRD) is gone, and its objects with it
	}
	if err != nil {
		return err
	}
	policy := metav1.DeletePropagationForeground
	err = ri.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", gvk.Kind, id, err)
	}
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := ri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("%s %s was not deleted: %w", gvk.Kind, id, err)
	}
	return nil
}

// liveInputs is what a refresh records as the object's inputs, as the real provider's Read does
// ("pruned live state"): the live values of exactly the fields the last applied inputs set, so a
// field changed by hand shows in the next update's diff and is applied again, while fields the
// server or other managers set stay out. A Secret's `stringData` is write-only (the server
// folds it into `data`), so the applied value is kept.
func liveInputs(live, applied resource.PropertyMap) resource.PropertyMap {
	out := prune(live, applied)
	if sd, ok := applied["stringData"]; ok && applied["kind"].IsString() && applied["kind"].StringValue() == "Secret" {
		out["stringData"] = sd
	}
	return out
}

func prune(live, applied resource.PropertyMap) resource.PropertyMap {
	out := resource.PropertyMap{}
	for k, a := range applied {
		if l, ok := live[k]; ok {
			out[k] = pruneValue(l, a)
		}
	}
	return out
}

func pruneValue(live, applied resource.PropertyValue) resource.PropertyValue {
	secret := applied.IsSecret() || live.IsSecret()
	if applied.IsSecret() {
		applied = applied.SecretValue().Element
	}
	if live.IsSecret() {
		live = live.SecretValue().Element
	}
	out := live
	switch {
	case applied.IsObject() && live.IsObject():
		out = resource.NewObjectProperty(prune(live.ObjectValue(), applied.ObjectValue()))
	case applied.IsArray() && live.IsArray():
		l, a := live.ArrayValue(), applied.ArrayValue()
		items := make([]resource.PropertyValue, 0, len(a))
		for i := range a {
			if i >= len(l) {
				break
			}
			items = append(items, pruneValue(l[i], a[i]))
		}
		out = resource.NewArrayProperty(items)
	}
	if secret {
		return resource.MakeSecret(out)
	}
	return out
}

// readInputs is what the real provider records as the inputs (`__inputs` in the outputs) of an
// object the program only reads (`.get`, no inputs): on the first read, every field of the live
// object but status and server-set metadata; on a refresh of it, only its identity. So every
// refresh of a read object changes its recorded state and the engine counts an update, and the
// next update's read changes it back, as with the real provider (issue 19).
func readInputs(live resource.PropertyMap, first bool) resource.PropertyMap {
	meta := resource.PropertyMap{}
	if m := live["metadata"]; m.IsObject() {
		for _, k := range []resource.PropertyKey{"name", "namespace"} {
			if v, ok := m.ObjectValue()[k]; ok {
				meta[k] = v
			}
		}
	}
	out := resource.PropertyMap{"apiVersion": live["apiVersion"], "kind": live["kind"], "metadata": resource.NewObjectProperty(meta)}
	if !first {
		return out
	}
	for k, v := range live {
		if k != "status" && k != "metadata" && k != "__inputs" {
			out[k] = v
		}
	}
	if m := live["metadata"]; m.IsObject() {
		for k, v := range m.ObjectValue() {
			switch k {
			case "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink":
			default:
				meta[k] = v
			}
		}
	}
	return out
}
