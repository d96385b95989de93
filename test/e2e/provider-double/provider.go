package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	releaseType  = "kubernetes:helm.sh/v3:Release"
	providerType = "pulumi:providers:kubernetes"
)

type kubeProvider struct {
	pulumirpc.UnimplementedResourceProviderServer
	host *provider.HostClient

	mu      sync.Mutex
	cluster *cluster // nil until configured with a known kubeconfig

	ctx    context.Context
	cancel context.CancelFunc
}

func newProvider(host *provider.HostClient) *kubeProvider {
	ctx, cancel := context.WithCancel(context.Background())
	return &kubeProvider{host: host, ctx: ctx, cancel: cancel}
}

var (
	inOpts  = plugin.MarshalOptions{KeepUnknowns: true, SkipNulls: true}
	outOpts = plugin.MarshalOptions{KeepUnknowns: true, KeepSecrets: true}
)

func unmarshal(s *structpb.Struct) (resource.PropertyMap, error) {
	if s == nil {
		return resource.PropertyMap{}, nil
	}
	return plugin.UnmarshalProperties(s, inOpts)
}

func marshal(m resource.PropertyMap) (*structpb.Struct, error) {
	return plugin.MarshalProperties(m, outOpts)
}

func logf(format string, args ...any) {
	if os.Getenv("PROVIDER_DOUBLE_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "kubernetes double: "+format+"\n", args...)
	}
}

func (p *kubeProvider) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

func (p *kubeProvider) Attach(context.Context, *pulumirpc.PluginAttach) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (p *kubeProvider) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	p.cancel()
	return &emptypb.Empty{}, nil
}

func (p *kubeProvider) GetSchema(context.Context, *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	return &pulumirpc.GetSchemaResponse{Schema: `{"name":"kubernetes","version":"` + version + `"}`}, nil
}

func (p *kubeProvider) CheckConfig(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

func (p *kubeProvider) DiffConfig(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	return p.diff(req, nil)
}

func (p *kubeProvider) Configure(_ context.Context, req *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	var kubeconfig resource.PropertyValue
	if args := req.GetArgs(); args != nil {
		props, err := unmarshal(args)
		if err != nil {
			return nil, err
		}
		kubeconfig = props["kubeconfig"]
	} else if v, ok := req.GetVariables()["kubernetes:config:kubeconfig"]; ok {
		kubeconfig = resource.NewStringProperty(v)
	}
	resp := &pulumirpc.ConfigureResponse{AcceptSecrets: false, SupportsPreview: true}
	if kubeconfig.IsComputed() || kubeconfig.IsOutput() && !kubeconfig.OutputValue().Known {
		logf("configured with an unknown kubeconfig (preview)")
		return resp, nil
	}
	text := ""
	if kubeconfig.IsString() {
		text = kubeconfig.StringValue()
	}
	c, err := newCluster(text)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	p.mu.Lock()
	p.cluster = c
	p.mu.Unlock()
	return resp, nil
}

func (p *kubeProvider) target() (*cluster, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cluster == nil {
		return nil, fmt.Errorf("the provider has no known kubeconfig")
	}
	return p.cluster, nil
}

// Check fills in a generated metadata.name when none is given (kept across updates), and
// otherwise returns the inputs as given.
func (p *kubeProvider) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	if req.GetType() == releaseType {
		return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
	}
	news, err := unmarshal(req.GetNews())
	if err != nil {
		return nil, err
	}
	meta := news["metadata"]
	if meta.IsComputed() || (meta.IsObject() && meta.ObjectValue()["name"].HasValue()) {
		return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
	}
	olds, err := unmarshal(req.GetOlds())
	if err != nil {
		return nil, err
	}
	name := ""
	if om := olds["metadata"]; om.IsObject() && om.ObjectValue()["name"].IsString() {
		name = om.ObjectValue()["name"].StringValue()
	} else {
		suffix := make([]byte, 4)
		_, _ = rand.Read(suffix)
		name = req.GetName() + "-" + hex.EncodeToString(suffix)
	}
	m := resource.PropertyMap{}
	if meta.IsObject() {
		m = meta.ObjectValue().Copy()
	}
	m["name"] = resource.NewStringProperty(name)
	news["metadata"] = resource.NewObjectProperty(m)
	inputs, err := marshal(news)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CheckResponse{Inputs: inputs}, nil
}

func (p *kubeProvider) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	if req.GetType() == releaseType {
		return p.diff(req, []string{"name", "namespace"})
	}
	return p.diff(req, []string{"apiVersion", "kind", "metadata.name", "metadata.namespace"})
}

// diff compares the old inputs with the new ones, key by key. A change of a replace key (a
// dotted path) means delete-then-create: the names are fixed, so the new object cannot exist
// beside the old one.
func (p *kubeProvider) diff(req *pulumirpc.DiffRequest, replaceKeys []string) (*pulumirpc.DiffResponse, error) {
	oldStruct := req.GetOldInputs()
	if oldStruct == nil {
		oldStruct = req.GetOlds()
	}
	olds, err := unmarshal(oldStruct)
	if err != nil {
		return nil, err
	}
	news, err := unmarshal(req.GetNews())
	if err != nil {
		return nil, err
	}
	ignored := map[string]bool{}
	for _, k := range req.GetIgnoreChanges() {
		ignored[k] = true
	}
	keys := map[string]bool{}
	for k := range olds {
		keys[string(k)] = true
	}
	for k := range news {
		keys[string(k)] = true
	}
	var changed []string
	for k := range keys {
		if ignored[k] || k == "__inputs" {
			continue
		}
		o, n := olds[resource.PropertyKey(k)], news[resource.PropertyKey(k)]
		if n.ContainsUnknowns() || !o.DeepEquals(n) {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	var replaces []string
	for _, path := range replaceKeys {
		o, n := lookup(olds, path), lookup(news, path)
		if n.ContainsUnknowns() || !o.DeepEquals(n) {
			if o.HasValue() {
				replaces = append(replaces, path)
			}
		}
	}
	resp := &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}
	if len(changed) > 0 {
		resp.Changes = pulumirpc.DiffResponse_DIFF_SOME
		resp.Diffs = changed
		resp.Replaces = replaces
		resp.DeleteBeforeReplace = len(replaces) > 0
	}
	return resp, nil
}

func lookup(m resource.PropertyMap, path string) resource.PropertyValue {
	parts := strings.Split(path, ".")
	v := resource.NewObjectProperty(m)
	for _, part := range parts {
		if !v.IsObject() {
			return resource.NewNullProperty()
		}
		v = v.ObjectValue()[resource.PropertyKey(part)]
	}
	return v
}

func timeoutOf(seconds float64, fallback time.Duration) time.Duration {
	if seconds > 0 {
		return time.Duration(seconds * float64(time.Second))
	}
	return fallback
}

func (p *kubeProvider) Create(_ context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	if req.GetPreview() {
		return &pulumirpc.CreateResponse{Properties: req.GetProperties()}, nil
	}
	c, err := p.target()
	if err != nil {
		return nil, err
	}
	news, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(p.ctx, timeoutOf(req.GetTimeout(), 20*time.Minute))
	defer cancel()
	var id string
	var outs resource.PropertyMap
	if req.GetType() == releaseType {
		id, outs, err = c.installRelease(ctx, news)
	} else {
		id, outs, err = c.applyObject(ctx, news)
	}
	if err != nil {
		return nil, err
	}
	props, err := marshal(outs)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: id, Properties: props}, nil
}

func (p *kubeProvider) Update(_ context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	if req.GetPreview() {
		return &pulumirpc.UpdateResponse{Properties: req.GetNews()}, nil
	}
	c, err := p.target()
	if err != nil {
		return nil, err
	}
	news, err := unmarshal(req.GetNews())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(p.ctx, timeoutOf(req.GetTimeout(), 20*time.Minute))
	defer cancel()
	var outs resource.PropertyMap
	if req.GetType() == releaseType {
		_, outs, err = c.upgradeRelease(ctx, news)
	} else {
		_, outs, err = c.applyObject(ctx, news)
	}
	if err != nil {
		return nil, err
	}
	props, err := marshal(outs)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.UpdateResponse{Properties: props}, nil
}

// Read returns the live state, or an empty id when the object (or release) no longer exists.
// An object's inputs become the live values of the fields they set (liveInputs), as the real
// provider's; a read object's (no inputs) and a release's inputs are handed back unchanged.
func (p *kubeProvider) Read(_ context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	c, err := p.target()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Minute)
	defer cancel()
	olds, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	var outs resource.PropertyMap
	var found bool
	if req.GetType() == releaseType {
		outs, found, err = c.readRelease(ctx, req.GetId(), olds)
	} else {
		outs, found, err = c.readObject(ctx, req.GetType(), req.GetId())
	}
	if err != nil {
		return nil, err
	}
	if !found {
		return &pulumirpc.ReadResponse{Id: ""}, nil
	}
	inputs := req.GetInputs()
	if req.GetType() != releaseType {
		applied, err := unmarshal(req.GetInputs())
		if err != nil {
			return nil, err
		}
		if len(applied) > 0 {
			refreshed := liveInputs(outs, applied)
			outs["__inputs"] = resource.NewObjectProperty(refreshed)
			if inputs, err = marshal(refreshed); err != nil {
				return nil, err
			}
		} else {
			outs["__inputs"] = resource.NewObjectProperty(readInputs(outs, len(olds) == 0))
		}
	}
	props, err := marshal(outs)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.ReadResponse{Id: req.GetId(), Properties: props, Inputs: inputs}, nil
}

func (p *kubeProvider) Delete(_ context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	c, err := p.target()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(p.ctx, timeoutOf(req.GetTimeout(), 20*time.Minute))
	defer cancel()
	olds, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	if req.GetType() == releaseType {
		err = c.uninstallRelease(ctx, req.GetId(), olds)
	} else {
		err = c.deleteObject(ctx, req.GetType(), req.GetId())
	}
	if err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (p *kubeProvider) Invoke(_ context.Context, req *pulumirpc.InvokeRequest) (*pulumirpc.InvokeResponse, error) {
	return nil, fmt.Errorf("function %s is not supported by the test double", req.GetTok())
}
