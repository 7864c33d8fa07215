package tests

// The Kubernetes manifests in deploy/k8s are validated here, without a
// cluster, as each overlay renders them (deploy_render_test.go): every
// document decodes strictly into its Kubernetes API type (a
// misspelled field fails), and the settings that must agree across files —
// the programs' flags, the ports they listen on, probes, Services, the
// catalog and the credentials it names, etcd's membership — are checked
// against the real code (app.ParseFlags, catalog.Parse). TestDeployChecksCatchBreakage
// proves each check fails on the breakage it exists for.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/debugserver"
	"github.com/switchboard-ai/switchboard/pkg/flagenv"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
	edgeapp "github.com/switchboard-ai/switchboard/services/edge/app"
)

const (
	deployDir       = "../deploy/k8s"
	deployNamespace = "switchboard"
	// deployNameLabel says which program a pod template runs: decider, edge or etcd.
	deployNameLabel = "app.kubernetes.io/name"
	// deployRegionLabel must equal an edge's --region.
	deployRegionLabel       = "switchboard.ai/region"
	deployCredentialsSecret = "provider-credentials"
	// deployPlaceholder starts every value of the committed credentials
	// Secret, so a real key is never committed by accident.
	deployPlaceholder = "REPLACE_ME"
)

// deployExternalSecrets are the Secrets the manifests mount but do not
// contain: certificates and keys, made per installation (deploy/k8s/README.md
// says how; checkDeployExternalSecrets requires it to).
var deployExternalSecrets = map[string]bool{
	"etcd-tls":                true,
	"decider-tls":             true,
	"decider-etcd-client-tls": true,
	"edge-tls":                true,
}

// deployKinds are the kinds the manifests may use, with the apiVersion each
// must be written in (no deprecated versions) and the type it decodes into.
// A new kind needs an entry here, and checks if it matters.
var deployKinds = map[string]struct {
	apiVersion string
	newObj     func() any
}{
	"Namespace":               {"v1", func() any { return new(corev1.Namespace) }},
	"ConfigMap":               {"v1", func() any { return new(corev1.ConfigMap) }},
	"Secret":                  {"v1", func() any { return new(corev1.Secret) }},
	"Service":                 {"v1", func() any { return new(corev1.Service) }},
	"StatefulSet":             {"apps/v1", func() any { return new(appsv1.StatefulSet) }},
	"Deployment":              {"apps/v1", func() any { return new(appsv1.Deployment) }},
	"PodDisruptionBudget":     {"policy/v1", func() any { return new(policyv1.PodDisruptionBudget) }},
	"HorizontalPodAutoscaler": {"autoscaling/v2", func() any { return new(autoscalingv2.HorizontalPodAutoscaler) }},
	"NetworkPolicy":           {"networking.k8s.io/v1", func() any { return new(networkingv1.NetworkPolicy) }},
}

// deployProgramSpec describes one of our programs as the manifests run it.
type deployProgramSpec struct {
	// prefix is the environment prefix of its flags (flagenv.Name).
	prefix string
	// parse runs the program's real flag parsing.
	// health is the address of a listener serving only grpc.health.v1
	// ("" when the program has none).
	parse func(args []string, getenv func(string) string) (listen, health string, cfg any, err error)
}

// deployPrograms maps a pod template's deployNameLabel to its program; every
// Deployment must run one of them.
var deployPrograms = map[string]deployProgramSpec{
	"decider": {prefix: "SWITCHBOARD_DECIDER", parse: func(args []string, getenv func(string) string) (string, string, any, error) {
		cfg, err := deciderapp.ParseFlags(args, getenv, io.Discard)
		return cfg.Listen, cfg.HealthListen, cfg, err
	}},
	"edge": {prefix: "SWITCHBOARD_EDGE", parse: func(args []string, getenv func(string) string) (string, string, any, error) {
		cfg, err := edgeapp.ParseFlags(args, getenv)
		return cfg.Listen, "", cfg, err
	}},
}

// knownEnv returns every environment variable the program reads for its
// flags. ParseFlags hides its FlagSet, but it asks getenv for each flag's
// variable, so recording the names asked for is the real list.
func (s deployProgramSpec) knownEnv() map[string]bool {
	names := map[string]bool{}
	_, _, _, _ = s.parse(nil, func(name string) string {
		names[name] = true
		return ""
	})
	return names
}

// deployDoc is one YAML document of a manifest file.
type deployDoc struct {
	file                  string
	index                 int
	kind, name, namespace string
	obj                   any
}

func (d deployDoc) String() string {
	return fmt.Sprintf("%s#%d %s/%s", d.file, d.index, d.kind, d.name)
}

// deployBundle is what one overlay of deploy/k8s renders to, decoded.
type deployBundle struct {
	overlay      string
	spec         deployOverlaySpec
	tree         *deployTree // every kustomization of deploy/k8s, for checkDeployKustomization
	docs         []deployDoc
	namespaces   map[string]*corev1.Namespace
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet
	deployments  map[string]*appsv1.Deployment
	pdbs         map[string]*policyv1.PodDisruptionBudget
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	netpols      map[string]*networkingv1.NetworkPolicy

	// parsed memoizes programs: every check reads them, one reports errors.
	parsed    bool
	progs     []deployProgram
	progsErrs error
}

// loadDeployBundle renders overlay (a folder of deploy/k8s/overlays) with
// kustomize and strictly decodes every document it renders.
func loadDeployBundle(overlay string) (*deployBundle, error) {
	spec, ok := deployOverlays[overlay]
	if !ok {
		return nil, fmt.Errorf("overlay %s is not in deployOverlays", overlay)
	}
	b := &deployBundle{
		overlay:      overlay,
		spec:         spec,
		namespaces:   map[string]*corev1.Namespace{},
		configMaps:   map[string]*corev1.ConfigMap{},
		secrets:      map[string]*corev1.Secret{},
		services:     map[string]*corev1.Service{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		deployments:  map[string]*appsv1.Deployment{},
		pdbs:         map[string]*policyv1.PodDisruptionBudget{},
		hpas:         map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		netpols:      map[string]*networkingv1.NetworkPolicy{},
	}
	tree, err := loadDeployTree(deployDir)
	if err != nil {
		return nil, err
	}
	b.tree = tree
	data, err := renderDeployOverlay(overlay)
	if err != nil {
		return nil, err
	}
	return b, b.addFile("overlays/"+overlay, data)
}

// addFile decodes every document of a manifest file.
func (b *deployBundle) addFile(file string, data []byte) error {
	docs, err := splitDeployDocs(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if len(docs) == 0 {
		return fmt.Errorf("%s: no documents", file)
	}
	var errs []error
	for i, raw := range docs {
		d, err := decodeDeployDoc(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s#%d: %w", file, i, err))
			continue
		}
		d.file, d.index = file, i
		if err := b.add(d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// splitDeployDocs splits a multi-document YAML stream and re-encodes each
// document on its own; documents holding only comments are skipped.
func splitDeployDocs(data []byte) ([][]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs [][]byte
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse yaml: %w", err)
		}
		if len(n.Content) == 0 {
			continue
		}
		if n.Content[0].Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: a document must be a mapping", n.Content[0].Line)
		}
		out, err := yaml.Marshal(n.Content[0])
		if err != nil {
			return nil, err
		}
		docs = append(docs, out)
	}
}

// decodeDeployDoc decodes one document strictly into its Kubernetes type:
// unknown or duplicate fields and ill-typed values (a bad quantity, a string
// for a number) are errors, as the API server's strict field validation makes them.
func decodeDeployDoc(raw []byte) (deployDoc, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := sigsyaml.Unmarshal(raw, &meta); err != nil {
		return deployDoc{}, err
	}
	if meta.APIVersion == "" || meta.Kind == "" {
		return deployDoc{}, errors.New("apiVersion and kind are required")
	}
	k, ok := deployKinds[meta.Kind]
	if !ok {
		return deployDoc{}, fmt.Errorf("kind %q is not one this test knows: add it to deployKinds", meta.Kind)
	}
	if meta.APIVersion != k.apiVersion {
		return deployDoc{}, fmt.Errorf("%s must be apiVersion %s, not %s", meta.Kind, k.apiVersion, meta.APIVersion)
	}
	obj := k.newObj()
	if err := sigsyaml.UnmarshalStrict(raw, obj); err != nil {
		return deployDoc{}, fmt.Errorf("%s %q: %w", meta.Kind, meta.Metadata.Name, err)
	}
	return deployDoc{kind: meta.Kind, name: meta.Metadata.Name, namespace: meta.Metadata.Namespace, obj: obj}, nil
}

func (b *deployBundle) add(d deployDoc) error {
	b.docs = append(b.docs, d)
	var dup bool
	switch o := d.obj.(type) {
	case *corev1.Namespace:
		_, dup = b.namespaces[d.name]
		b.namespaces[d.name] = o
	case *corev1.ConfigMap:
		_, dup = b.configMaps[d.name]
		b.configMaps[d.name] = o
	case *corev1.Secret:
		_, dup = b.secrets[d.name]
		b.secrets[d.name] = o
	case *corev1.Service:
		_, dup = b.services[d.name]
		b.services[d.name] = o
	case *appsv1.StatefulSet:
		_, dup = b.statefulSets[d.name]
		b.statefulSets[d.name] = o
	case *appsv1.Deployment:
		_, dup = b.deployments[d.name]
		b.deployments[d.name] = o
	case *policyv1.PodDisruptionBudget:
		_, dup = b.pdbs[d.name]
		b.pdbs[d.name] = o
	case *autoscalingv2.HorizontalPodAutoscaler:
		_, dup = b.hpas[d.name]
		b.hpas[d.name] = o
	case *networkingv1.NetworkPolicy:
		_, dup = b.netpols[d.name]
		b.netpols[d.name] = o
	}
	if dup {
		return fmt.Errorf("a second %s named %q", d.kind, d.name)
	}
	return nil
}

// deployWorkload is a Deployment or StatefulSet, seen through its pod template.
type deployWorkload struct {
	kind, name string
	selector   *metav1.LabelSelector
	labels     map[string]string
	annots     map[string]string // the pod template's annotations
	replicas   int32             // 1 when unset, as the API defaults it
	pod        *corev1.PodSpec
	claims     []string // volumeClaimTemplates
}

func (w deployWorkload) String() string { return w.kind + " " + w.name }

func (b *deployBundle) workloads() []deployWorkload {
	var ws []deployWorkload
	for _, d := range b.docs {
		switch o := d.obj.(type) {
		case *appsv1.Deployment:
			ws = append(ws, deployWorkload{kind: "Deployment", name: o.Name, selector: o.Spec.Selector,
				labels: o.Spec.Template.Labels, annots: o.Spec.Template.Annotations, replicas: deployReplicas(o.Spec.Replicas), pod: &o.Spec.Template.Spec})
		case *appsv1.StatefulSet:
			w := deployWorkload{kind: "StatefulSet", name: o.Name, selector: o.Spec.Selector,
				labels: o.Spec.Template.Labels, annots: o.Spec.Template.Annotations, replicas: deployReplicas(o.Spec.Replicas), pod: &o.Spec.Template.Spec}
			for _, c := range o.Spec.VolumeClaimTemplates {
				w.claims = append(w.claims, c.Name)
			}
			ws = append(ws, w)
		}
	}
	return ws
}

func deployReplicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// selecting returns the workloads whose pod templates carry every label of sel.
func (b *deployBundle) selecting(sel map[string]string) []deployWorkload {
	var out []deployWorkload
	if len(sel) == 0 {
		return nil
	}
	for _, w := range b.workloads() {
		match := true
		for k, v := range sel {
			if w.labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, w)
		}
	}
	return out
}

// deployProgram is one container of a decider or edge Deployment, with its
// flags parsed by the program's own ParseFlags.
type deployProgram struct {
	workload   deployWorkload
	container  *corev1.Container
	program    string // "decider" or "edge"
	spec       deployProgramSpec
	env        map[string]deployEnvVar
	listenPort int32
	healthPort int32 // where its probes look: the health listener, else listenPort
	debugPort  int32 // its --admin-listen (metrics, health) when reachable from outside the pod, else 0
	cfg        any   // deciderapp.Config or edgeapp.Config
}

func (p deployProgram) String() string {
	return fmt.Sprintf("%s container %s", p.workload, p.container.Name)
}

// programs parses every container of every workload but etcd's, which must
// each run one of deployPrograms, once; mutate the bundle before the first call.
// Errors name the container and the problem; the containers returned are the
// ones that parsed. Only checkDeployFlags reports the errors, so a broken
// flag is reported once, and the other checks look at what parsed.
func (b *deployBundle) programs() ([]deployProgram, error) {
	if !b.parsed {
		b.progs, b.progsErrs = b.parsePrograms()
		b.parsed = true
	}
	return b.progs, b.progsErrs
}

func (b *deployBundle) parsePrograms() ([]deployProgram, error) {
	var out []deployProgram
	var errs []error
	for _, w := range b.workloads() {
		name := w.labels[deployNameLabel]
		if name == "etcd" {
			continue // not ours: checkDeployEtcd reads its flags
		}
		spec, ok := deployPrograms[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: label %s=%q is none of our programs, so nothing checks its flags", w, deployNameLabel, name))
			continue
		}
		for i := range w.pod.Containers {
			c := &w.pod.Containers[i]
			p := deployProgram{workload: w, container: c, program: name, spec: spec}
			env, err := b.containerEnv(w.name+"-0", c)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
				continue
			}
			p.env = env
			if err := p.parse(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p, err))
				continue
			}
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

var deployArgPattern = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)=`)

// parse checks the container's args and SWITCHBOARD_* env against the
// program's real flags, and parses them with its ParseFlags.
func (p *deployProgram) parse() error {
	var errs []error
	if len(p.container.Command) > 0 {
		errs = append(errs, errors.New("command must be empty: the image's entrypoint is the program and args are its flags"))
	}
	known := p.spec.knownEnv()
	if !known[flagenv.Name(p.spec.prefix, "listen")] {
		return fmt.Errorf("ParseFlags of %s did not ask for %s: cannot learn its flags", p.program, flagenv.Name(p.spec.prefix, "listen"))
	}
	inArgs := map[string]string{}
	for _, a := range p.container.Args {
		m := deployArgPattern.FindStringSubmatch(a)
		if m == nil {
			// "--flag value" pairs and positional arguments hide mistakes
			// (the flag package stops at the first non-flag), so one form only.
			errs = append(errs, fmt.Errorf("arg %q: write flags as --name=value", a))
			continue
		}
		envName := flagenv.Name(p.spec.prefix, m[1])
		if !known[envName] {
			errs = append(errs, fmt.Errorf("arg %q: %s has no flag --%s", a, p.program, m[1]))
		}
		inArgs[envName] = m[1]
	}
	for name := range p.env {
		if !strings.HasPrefix(name, "SWITCHBOARD_") {
			continue
		}
		switch {
		case !known[name]:
			errs = append(errs, fmt.Errorf("env %s is not a flag of %s (its flags read %s)", name, p.program, deploySorted(known)))
		case inArgs[name] != "":
			errs = append(errs, fmt.Errorf("env %s and arg --%s both set one flag: the arg silently wins", name, inArgs[name]))
		}
	}
	getenv := func(name string) string { return p.env[name].value }
	listen, health, cfg, err := p.spec.parse(p.container.Args, getenv)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s ParseFlags: %w", p.program, err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p.cfg = cfg
	if p.listenPort, err = deployListenPort("listen", listen); err != nil {
		return err
	}
	p.healthPort = p.listenPort
	if health != "" {
		if p.healthPort, err = deployListenPort("health-listen", health); err != nil {
			return err
		}
	}
	var admin debugserver.Listener
	switch c := cfg.(type) {
	case deciderapp.Config:
		admin, _ = c.Admin() // ParseFlags checked it
	case edgeapp.Config:
		admin, _ = c.Admin()
	}
	if admin.Addr != "" {
		// A port alone listens on loopback: no containerPort may name it.
		p.debugPort, _ = deployListenPort("admin-listen", admin.Addr)
	}
	if d, ok := cfg.(deciderapp.Config); ok && d.TLSCertFile != "" && health == "" {
		return errors.New("serves TLS without --health-listen: kubelet's gRPC probes cannot do TLS, so they would never pass")
	}
	return nil
}

// deployListenPort checks the address of a listener a pod is reached on.
func deployListenPort(flag, addr string) (int32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %w", flag, addr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return 0, fmt.Errorf("--%s %q: must listen on every interface (0.0.0.0), or nothing outside the pod reaches it", flag, addr)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--%s %q: a fixed port is required", flag, addr)
	}
	return int32(n), nil
}

func deploySorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// deployEnvVar is one environment variable a container gets, with where its
// value comes from.
type deployEnvVar struct {
	value  string
	secret string // the Secret it comes from, "" otherwise
}

// containerEnv returns the container's environment as the kubelet builds it:
// envFrom first, then env, which wins. Values from the downward API are
// stand-ins (the pod name is podName); references must resolve to objects
// and keys in the bundle.
func (b *deployBundle) containerEnv(podName string, c *corev1.Container) (map[string]deployEnvVar, error) {
	env := map[string]deployEnvVar{}
	var errs []error
	for _, from := range c.EnvFrom {
		switch {
		case from.SecretRef != nil:
			s, ok := b.secrets[from.SecretRef.Name]
			if !ok {
				if from.SecretRef.Optional == nil || !*from.SecretRef.Optional {
					errs = append(errs, fmt.Errorf("envFrom: no Secret %q", from.SecretRef.Name))
				}
				continue
			}
			for k, v := range deploySecretData(s) {
				env[from.Prefix+k] = deployEnvVar{value: v, secret: s.Name}
			}
		case from.ConfigMapRef != nil:
			cm, ok := b.configMaps[from.ConfigMapRef.Name]
			if !ok {
				if from.ConfigMapRef.Optional == nil || !*from.ConfigMapRef.Optional {
					errs = append(errs, fmt.Errorf("envFrom: no ConfigMap %q", from.ConfigMapRef.Name))
				}
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = deployEnvVar{value: v}
			}
		}
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			errs = append(errs, fmt.Errorf("env %s is set twice", e.Name))
		}
		seen[e.Name] = true
		v := deployEnvVar{value: e.Value}
		if f := e.ValueFrom; f != nil {
			switch {
			case f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.name":
				v.value = podName
			case f.FieldRef != nil:
				v.value = "field-" + f.FieldRef.FieldPath
			case f.ResourceFieldRef != nil:
				v.value = "1073741824"
			case f.SecretKeyRef != nil:
				s, ok := b.secrets[f.SecretKeyRef.Name]
				val, has := deploySecretData(s)[f.SecretKeyRef.Key]
				if !ok || !has {
					errs = append(errs, fmt.Errorf("env %s: no key %q in Secret %q", e.Name, f.SecretKeyRef.Key, f.SecretKeyRef.Name))
				}
				v = deployEnvVar{value: val, secret: f.SecretKeyRef.Name}
			case f.ConfigMapKeyRef != nil:
				cm, ok := b.configMaps[f.ConfigMapKeyRef.Name]
				if !ok || cm.Data[f.ConfigMapKeyRef.Key] == "" {
					errs = append(errs, fmt.Errorf("env %s: no key %q in ConfigMap %q", e.Name, f.ConfigMapKeyRef.Key, f.ConfigMapKeyRef.Name))
				} else {
					v.value = cm.Data[f.ConfigMapKeyRef.Key]
				}
			}
		}
		env[e.Name] = v
	}
	return env, errors.Join(errs...)
}

// deploySecretData merges a Secret's data and stringData, as the API server does.
func deploySecretData(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	if s == nil {
		return out
	}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

// deployArgs parses "--name=value" args (etcd's) into a map.
func deployArgs(args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		m := deployArgPattern.FindStringSubmatch(a)
		if m == nil {
			return nil, fmt.Errorf("arg %q: write flags as --name=value", a)
		}
		if _, dup := out[m[1]]; dup {
			return nil, fmt.Errorf("arg --%s is given twice", m[1])
		}
		out[m[1]] = strings.TrimPrefix(a, m[0])
	}
	return out, nil
}

var deployVarRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// deployExpand expands $(VAR) in args as the kubelet does.
func deployExpand(s string, env map[string]deployEnvVar) string {
	return deployVarRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v.value
		}
		return ref
	})
}

// deployService resolves a DNS name a pod would dial (name, name.ns,
// name.ns.svc, name.ns.svc.cluster.local) to a Service of the bundle.
func (b *deployBundle) deployService(host string) (*corev1.Service, bool) {
	host = strings.TrimSuffix(host, ".")
	name, rest, _ := strings.Cut(host, ".")
	switch rest {
	case "", deployNamespace, deployNamespace + ".svc", deployNamespace + ".svc.cluster.local":
		s, ok := b.services[name]
		return s, ok
	}
	return nil, false
}

// containerPort resolves a probe's or Service's port (number or name) in c.
func deployContainerPort(c *corev1.Container, port intstr.IntOrString) (int32, bool) {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// listeningPorts returns, per container of w, the ports its program listens
// on: --listen for our programs, the client and peer URLs for etcd.
func (b *deployBundle) listeningPorts(w deployWorkload, programs []deployProgram) (map[string]map[int32]bool, error) {
	out := map[string]map[int32]bool{}
	var errs []error
	for i := range w.pod.Containers {
		c := &w.pod.Containers[i]
		ports := map[int32]bool{}
		out[c.Name] = ports
		if w.labels[deployNameLabel] == "etcd" {
			args, err := deployArgs(c.Args)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s container %s: %w", w, c.Name, err))
				continue
			}
			for _, flag := range []string{"listen-client-urls", "listen-peer-urls", "listen-metrics-urls"} {
				if flag == "listen-metrics-urls" && args[flag] == "" {
					continue // optional
				}
				port, err := deployURLPort(args[flag])
				if err != nil {
					errs = append(errs, fmt.Errorf("%s container %s: --%s: %w", w, c.Name, flag, err))
				}
				ports[port] = true
			}
			continue
		}
		for _, p := range programs {
			if p.workload.name == w.name && p.container.Name == c.Name {
				ports[p.listenPort] = true
				ports[p.healthPort] = true
				if p.debugPort != 0 {
					ports[p.debugPort] = true
				}
			}
		}
		if len(ports) == 0 {
			errs = append(errs, fmt.Errorf("%s container %s: no known listening port", w, c.Name))
		}
	}
	return out, errors.Join(errs...)
}

// deployURLPort returns the port of a single URL with an explicit port.
func deployURLPort(s string) (int32, error) {
	if strings.Contains(s, ",") {
		return 0, fmt.Errorf("%q: one URL expected", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(u.Port(), 10, 32)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: an explicit port is required", s)
	}
	return int32(n), nil
}

// deployChecks are the checks of TestDeploy, each over the whole bundle.
var deployChecks = []struct {
	name  string
	check func(*deployBundle) error
}{
	{"kustomization lists exactly the manifests", checkDeployKustomization},
	{"metadata and namespace", checkDeployMetadata},
	{"selectors match pod templates", checkDeploySelectors},
	{"pod security", checkDeploySecurity},
	{"resources", checkDeployResources},
	{"volumes", checkDeployVolumes},
	{"flags and env parse with ParseFlags", checkDeployFlags},
	{"ports probes and services", checkDeployPorts},
	{"decider reaches etcd and edges reach the decider", checkDeployWiring},
	{"catalog parses and edges hold every credential", checkDeployCatalog},
	{"committed credentials are placeholders", checkDeployPlaceholders},
	{"grace periods cover shutdown", checkDeployGrace},
	{"etcd membership", checkDeployEtcd},
	{"statefulsets and their services", checkDeployStatefulSets},
	{"scheduling selectors", checkDeployScheduling},
	{"state on persistent volumes", checkDeployState},
	{"images built by the dockerfiles", checkDeployImages},
	{"disruption budgets", checkDeployPDBs},
	{"edge autoscaling and regions", checkDeployEdges},
	{"network policies", checkDeployNetworkPolicies},
	{"metrics scraped from the admin listeners", checkDeployScrape},
	{"external secrets documented", checkDeployExternalSecrets},
}

// TestDeployChecksCatchBreakage breaks a freshly decoded copy of the
// production overlay in one way each and requires the checks to notice, so a check that passes
// vacuously (matching nothing) cannot hide.
func TestDeployChecksCatchBreakage(t *testing.T) {
	decider := func(b *deployBundle) *corev1.Container {
		return &b.statefulSets["decider"].Spec.Template.Spec.Containers[0]
	}
	edge := func(b *deployBundle) *corev1.Container {
		return &b.deployments["edge-us-east"].Spec.Template.Spec.Containers[0]
	}
	setArg := func(c *corev1.Container, flag, value string) {
		for i, a := range c.Args {
			if strings.HasPrefix(a, "--"+flag+"=") {
				c.Args[i] = "--" + flag + "=" + value
				return
			}
		}
		panic("no arg --" + flag)
	}
	tests := []struct {
		name    string
		mutate  func(b *deployBundle)
		wantErr string
	}{
		{
			name:    "misspelled decider flag",
			mutate:  func(b *deployBundle) { decider(b).Args[0] = "--listn=0.0.0.0:9090" },
			wantErr: "no flag --listn",
		},
		{
			name:    "flag as two args",
			mutate:  func(b *deployBundle) { c := edge(b); c.Args = append(c.Args, "--max-attempts", "3") },
			wantErr: "write flags as --name=value",
		},
		{
			name: "unknown edge env var",
			mutate: func(b *deployBundle) {
				c := edge(b)
				c.Env = append(c.Env, corev1.EnvVar{Name: "SWITCHBOARD_EDGE_MAX_ATTEMPT", Value: "3"})
			},
			wantErr: "SWITCHBOARD_EDGE_MAX_ATTEMPT is not a flag",
		},
		{
			name: "invalid env value",
			mutate: func(b *deployBundle) {
				c := decider(b)
				for i := range c.Env {
					if c.Env[i].Name == "SWITCHBOARD_DECIDER_DRAIN_DELAY" {
						c.Env[i].Value = "5"
					}
				}
			},
			wantErr: "SWITCHBOARD_DECIDER_DRAIN_DELAY",
		},
		{
			name: "flag in args and env",
			mutate: func(b *deployBundle) {
				c := edge(b)
				c.Env = append(c.Env, corev1.EnvVar{Name: "SWITCHBOARD_EDGE_REGION", Value: "elsewhere"})
			},
			wantErr: "both set one flag",
		},
		{
			name:    "edge listens on loopback",
			mutate:  func(b *deployBundle) { setArg(edge(b), "listen", "127.0.0.1:8080") },
			wantErr: "must listen on every interface",
		},
		{
			name: "decider embedded etcd",
			mutate: func(b *deployBundle) {
				for _, f := range []string{"etcd", "etcd-ca-file", "etcd-cert-file", "etcd-key-file"} {
					setArg(decider(b), f, "")
				}
			},
			wantErr: "embedded etcd",
		},
		{
			name:    "decider probe on the wrong port",
			mutate:  func(b *deployBundle) { decider(b).ReadinessProbe.GRPC.Port = 9090 }, // TLS: kubelet cannot probe it
			wantErr: "readinessProbe",
		},
		{
			name:    "decider serving TLS without a plaintext health listener",
			mutate:  func(b *deployBundle) { setArg(decider(b), "health-listen", "") },
			wantErr: "--health-listen",
		},
		{
			name:    "edge listens where its probes and Service do not look",
			mutate:  func(b *deployBundle) { setArg(edge(b), "listen", "0.0.0.0:8081") },
			wantErr: "8081",
		},
		{
			name: "Service targets a port nobody listens on",
			mutate: func(b *deployBundle) {
				b.services["edge-eu-west"].Spec.Ports[0].TargetPort = intstr.FromInt32(8081)
			},
			wantErr: "targetPort",
		},
		{
			name:    "edge dials a decider Service that does not exist",
			mutate:  func(b *deployBundle) { setArg(edge(b), "decider", "dns:///deciders.switchboard.svc:9090") },
			wantErr: "deciders.switchboard.svc",
		},
		{
			name: "grace period shorter than drain plus shutdown",
			mutate: func(b *deployBundle) {
				b.statefulSets["decider"].Spec.Template.Spec.TerminationGracePeriodSeconds = new(int64(25))
			},
			wantErr: "terminationGracePeriodSeconds",
		},
		{
			name:    "edge ready whenever alive",
			mutate:  func(b *deployBundle) { edge(b).ReadinessProbe.HTTPGet.Path = "/healthz" },
			wantErr: "readinessProbe must be an HTTP GET of /readyz",
		},
		{
			name: "edge grace shorter than its stream drain",
			mutate: func(b *deployBundle) {
				c := edge(b)
				for i := range c.Env {
					if c.Env[i].Name == "SWITCHBOARD_EDGE_SHUTDOWN_GRACE" {
						c.Env[i].Value = "10m"
					}
				}
			},
			wantErr: "terminationGracePeriodSeconds",
		},
		{
			name: "edge without a drain delay",
			mutate: func(b *deployBundle) {
				c := edge(b)
				for i := range c.Env {
					if c.Env[i].Name == "SWITCHBOARD_EDGE_DRAIN_DELAY" {
						c.Env[i].Value = "0s"
					}
				}
			},
			wantErr: "--drain-delay must be positive",
		},
		{
			name: "catalog credential missing from the Secret",
			mutate: func(b *deployBundle) {
				delete(b.secrets[deployCredentialsSecret].StringData, "SWITCHBOARD_PROVIDER_KEY_GAMMA")
			},
			wantErr: "SWITCHBOARD_PROVIDER_KEY_GAMMA",
		},
		{
			name: "real-looking credential committed",
			mutate: func(b *deployBundle) {
				b.secrets[deployCredentialsSecret].StringData["SWITCHBOARD_PROVIDER_KEY_ALPHA"] = "sk-live-123"
			},
			wantErr: "placeholder",
		},
		{
			name: "invalid catalog",
			mutate: func(b *deployBundle) {
				cm := b.configMaps["switchboard-catalog"]
				cm.Data["catalog.yaml"] = strings.Replace(cm.Data["catalog.yaml"], "unit: requests", "unit: request", 1)
			},
			wantErr: `"request" must be one of`,
		},
		{
			name:    "etcd replicas and initial cluster disagree",
			mutate:  func(b *deployBundle) { b.statefulSets["etcd"].Spec.Replicas = new(int32(5)) },
			wantErr: "--initial-cluster",
		},
		{
			name: "etcd member with a wrong DNS name",
			mutate: func(b *deployBundle) {
				setArg(&b.statefulSets["etcd"].Spec.Template.Spec.Containers[0], "initial-cluster",
					"etcd-0=http://etcd-0.etcd-peer.switchboard.svc:2380,etcd-1=http://etcd-1.etcd.switchboard.svc:2380,etcd-2=http://etcd-2.etcd-peer.switchboard.svc:2380")
			},
			wantErr: "etcd-1",
		},
		{
			name: "etcd budget below quorum",
			mutate: func(b *deployBundle) {
				min := intstr.FromInt32(1)
				b.pdbs["etcd"].Spec.MinAvailable = &min
			},
			wantErr: "quorum",
		},
		{
			name: "manifest missing from kustomization",
			mutate: func(b *deployBundle) {
				k := b.tree.kusts["base/central"]
				k.Resources = k.Resources[1:]
			},
			wantErr: "base/central/namespace.yaml is not listed",
		},
		{
			name:    "patch missing from kustomization",
			mutate:  func(b *deployBundle) { b.tree.kusts["overlays/production"].Patches = nil },
			wantErr: "overlays/production/etcd.yaml is not listed",
		},
		{
			name: "kustomization no overlay includes",
			mutate: func(b *deployBundle) {
				b.tree.kusts["regions/ap-south"] = &deployKustomization{APIVersion: "kustomize.config.k8s.io/v1beta1", Kind: "Kustomization"}
			},
			wantErr: "regions/ap-south: no overlay includes",
		},
		{
			name: "etcd members may share a node",
			mutate: func(b *deployBundle) {
				b.statefulSets["etcd"].Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = nil
			},
			wantErr: "required podAntiAffinity on kubernetes.io/hostname",
		},
		{
			name: "anti-affinity selecting other pods",
			mutate: func(b *deployBundle) {
				aa := b.statefulSets["etcd"].Spec.Template.Spec.Affinity.PodAntiAffinity
				aa.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels = map[string]string{deployNameLabel: "decider"}
			},
			wantErr: "does not select its own pods",
		},
		{
			name: "spread constraint of another region",
			mutate: func(b *deployBundle) {
				b.deployments["edge-us-east"].Spec.Template.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels[deployRegionLabel] = "eu-west"
			},
			wantErr: "topologySpreadConstraint topology.kubernetes.io/zone selector",
		},
		{
			name: "etcd data on an emptyDir",
			mutate: func(b *deployBundle) {
				sts := b.statefulSets["etcd"]
				sts.Spec.Template.Spec.Volumes = append(sts.Spec.Template.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			},
			wantErr: "volume data is also a pod volume",
		},
		{
			name:    "decider activity log without a claim",
			mutate:  func(b *deployBundle) { b.statefulSets["decider"].Spec.VolumeClaimTemplates = nil },
			wantErr: "the activity log",
		},
		{
			name:    "decider volume not writable by its user",
			mutate:  func(b *deployBundle) { b.statefulSets["decider"].Spec.Template.Spec.SecurityContext.FSGroup = nil },
			wantErr: "without the pod's fsGroup",
		},
		{
			name:    "two deciders in production",
			mutate:  func(b *deployBundle) { b.statefulSets["decider"].Spec.Replicas = new(int32(2)) },
			wantErr: "production runs 3 deciders",
		},
		{
			name:    "StatefulSet without its Service",
			mutate:  func(b *deployBundle) { b.statefulSets["decider"].Spec.ServiceName = "deciders" },
			wantErr: `serviceName "deciders" is not a Service`,
		},
		{
			name:    "StatefulSet Service not headless",
			mutate:  func(b *deployBundle) { b.services["decider"].Spec.ClusterIP = "" },
			wantErr: "must be headless",
		},
		{
			name:    "decider Service publishes pods not ready",
			mutate:  func(b *deployBundle) { b.services["decider"].Spec.PublishNotReadyAddresses = true },
			wantErr: "publishes pods that are not ready",
		},
		{
			name: "edges scaled on CPU only in production",
			mutate: func(b *deployBundle) {
				h := b.hpas["edge-eu-west"]
				h.Spec.Metrics = h.Spec.Metrics[:1]
			},
			wantErr: "HorizontalPodAutoscaler edge-eu-west: production scales edges on " + deployStreamsMetric,
		},
		{
			name:    "HPA scales a Deployment that is not here",
			mutate:  func(b *deployBundle) { b.hpas["edge-eu-west"].Spec.ScaleTargetRef.Name = "edge" },
			wantErr: "scaleTargetRef apps/v1 Deployment/edge is not a Deployment here",
		},
		{
			name:    "PDB selecting nothing",
			mutate:  func(b *deployBundle) { b.pdbs["decider"].Spec.Selector.MatchLabels[deployNameLabel] = "deciders" },
			wantErr: "PodDisruptionBudget decider: selects 0 workloads",
		},
		{
			name:    "an overlay without a region",
			mutate:  func(b *deployBundle) { b.spec.regions = slices.Concat(b.spec.regions, []string{"ap-south"}) },
			wantErr: "must serve [eu-west us-east ap-south]",
		},
		{
			name:    "edge runs the decider's image",
			mutate:  func(b *deployBundle) { edge(b).Image = "ghcr.io/switchboard-ai/decider:latest" },
			wantErr: "is not the edge image",
		},
		{
			name: "pod user is not the image's",
			mutate: func(b *deployBundle) {
				b.statefulSets["decider"].Spec.Template.Spec.SecurityContext.RunAsUser = new(int64(1000))
			},
			wantErr: "runAsUser 1000, the image's USER is 65532",
		},
		{
			name: "admin port the edge does not listen on",
			mutate: func(b *deployBundle) {
				c := edge(b)
				for i := range c.Ports {
					if c.Ports[i].Name == "admin" {
						c.Ports[i].ContainerPort = 9192
					}
				}
			},
			wantErr: "containerPort 9192",
		},
		{
			name:    "admin listeners open to the namespace",
			mutate:  func(b *deployBundle) { b.netpols["admin-metrics"].Spec.Ingress[0].From = nil },
			wantErr: "internet must not reach edge-us-east on TCP/9191",
		},
		{
			name: "scrape annotation names a port the decider does not serve metrics on",
			mutate: func(b *deployBundle) {
				b.statefulSets["decider"].Spec.Template.Annotations["prometheus.io/port"] = "9090"
			},
			wantErr: "prometheus.io/port 9090 is not its admin listener's",
		},
		{
			name: "scrape path",
			mutate: func(b *deployBundle) {
				b.deployments["edge-us-east"].Spec.Template.Annotations["prometheus.io/path"] = "/debug/pprof/"
			},
			wantErr: "prometheus.io/path",
		},
		{
			name: "edge without its admin listener",
			mutate: func(b *deployBundle) {
				c := edge(b)
				c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--admin-listen=") })
			},
			wantErr: "no admin listener",
		},
		{
			name:    "writable root filesystem",
			mutate:  func(b *deployBundle) { edge(b).SecurityContext.ReadOnlyRootFilesystem = new(false) },
			wantErr: "readOnlyRootFilesystem",
		},
		{
			name:    "wrong namespace",
			mutate:  func(b *deployBundle) { b.docs[len(b.docs)-1].namespace = "default" },
			wantErr: "namespace",
		},
		{
			name: "region label and --region disagree",
			mutate: func(b *deployBundle) {
				setArg(edge(b), "region", "us-west")
			},
			wantErr: "us-west",
		},
		{
			name: "decider open to the namespace",
			mutate: func(b *deployBundle) {
				delete(b.netpols, "decider")
				delete(b.netpols, "default-deny")
				delete(b.netpols, "admin-metrics")
			},
			wantErr: "internet must not reach decider on TCP/9090",
		},
		{
			name: "edges may reach private addresses",
			mutate: func(b *deployBundle) {
				np := b.netpols["edge"]
				np.Spec.Egress[1].To[0].IPBlock.Except = nil
			},
			wantErr: "edge-us-east must not reach cloud metadata on TCP/443",
		},
		{
			name:    "etcd open to every source",
			mutate:  func(b *deployBundle) { b.netpols["etcd"].Spec.Ingress[0].From = nil },
			wantErr: "internet must not reach etcd on TCP/2379",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := loadDeployBundle("production")
			require.NoError(t, err)
			tt.mutate(b)
			var errs []error
			for _, c := range deployChecks {
				errs = append(errs, c.check(b))
			}
			require.ErrorContains(t, errors.Join(errs...), tt.wantErr)
		})
	}
}

// TestDeployStrictDecoding shows that a misspelled or ill-typed field fails
// to decode instead of being dropped.
func TestDeployStrictDecoding(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr string
	}{
		{
			name:    "misspelled field",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: switchboard}\nspec: {selectr: {a: b}}\n",
			wantErr: `unknown field "selectr"`,
		},
		{
			name:    "unknown kind",
			doc:     "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
			wantErr: "kind \"Pod\" is not one this test knows",
		},
		{
			name: "bad quantity",
			doc: "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\n" +
				"spec: {template: {spec: {containers: [{name: c, resources: {requests: {memory: 512mb}}}]}}}\n",
			wantErr: "quantities must match",
		},
		{
			name:    "deprecated apiVersion",
			doc:     "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: x}\n",
			wantErr: "must be apiVersion autoscaling/v2",
		},
		{
			name: "ill-typed value",
			doc: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n" +
				"spec: {replicas: two, selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {containers: []}}}\n",
			wantErr: "replicas",
		},
		{
			name:    "duplicate key",
			doc:     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
			wantErr: "already",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := splitDeployDocs([]byte(tt.doc))
			if err == nil {
				require.Len(t, docs, 1)
				_, err = decodeDeployDoc(docs[0])
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func checkDeployMetadata(b *deployBundle) error {
	var errs []error
	for _, d := range b.docs {
		switch {
		case d.name == "":
			errs = append(errs, fmt.Errorf("%s: metadata.name is required", d))
		case d.kind == "Namespace" && d.namespace != "":
			errs = append(errs, fmt.Errorf("%s: a Namespace has no metadata.namespace", d))
		case d.kind != "Namespace" && d.namespace != deployNamespace:
			errs = append(errs, fmt.Errorf("%s: metadata.namespace is %q, want %q", d, d.namespace, deployNamespace))
		}
	}
	if _, ok := b.namespaces[deployNamespace]; !ok {
		errs = append(errs, fmt.Errorf("no Namespace %q manifest", deployNamespace))
	}
	return errors.Join(errs...)
}

func checkDeploySelectors(b *deployBundle) error {
	var errs []error
	ws := b.workloads()
	if len(ws) == 0 {
		errs = append(errs, errors.New("no Deployments or StatefulSets"))
	}
	for _, w := range ws {
		switch {
		case w.selector == nil || len(w.selector.MatchLabels) == 0 || len(w.selector.MatchExpressions) > 0:
			errs = append(errs, fmt.Errorf("%s: selector must be matchLabels only", w))
		case len(b.selecting(w.selector.MatchLabels)) != 1:
			errs = append(errs, fmt.Errorf("%s: selector %v must match its own pod template and no other workload's", w, w.selector.MatchLabels))
		}
		for k, v := range w.selector.MatchLabels {
			if w.labels[k] != v {
				errs = append(errs, fmt.Errorf("%s: selector %s=%s is not a label of the pod template", w, k, v))
			}
		}
		if w.labels[deployNameLabel] == "" {
			errs = append(errs, fmt.Errorf("%s: pod template needs label %s", w, deployNameLabel))
		}
	}
	return errors.Join(errs...)
}

// checkDeploySecurity requires what the "restricted" Pod Security Standard
// requires, plus a read-only root filesystem and no service-account token.
func checkDeploySecurity(b *deployBundle) error {
	var errs []error
	for _, w := range b.workloads() {
		pod := w.pod
		psc := pod.SecurityContext
		if psc == nil {
			psc = &corev1.PodSecurityContext{}
		}
		if pod.HostNetwork || pod.HostPID || pod.HostIPC {
			errs = append(errs, fmt.Errorf("%s: host namespaces are not allowed", w))
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			errs = append(errs, fmt.Errorf("%s: automountServiceAccountToken must be false (nothing here calls the Kubernetes API)", w))
		}
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			sc := c.SecurityContext
			if sc == nil {
				errs = append(errs, fmt.Errorf("%s container %s: securityContext is required", w, c.Name))
				continue
			}
			nonRoot := psc.RunAsNonRoot
			if sc.RunAsNonRoot != nil {
				nonRoot = sc.RunAsNonRoot
			}
			user := psc.RunAsUser
			if sc.RunAsUser != nil {
				user = sc.RunAsUser
			}
			seccomp := psc.SeccompProfile
			if sc.SeccompProfile != nil {
				seccomp = sc.SeccompProfile
			}
			switch {
			case nonRoot == nil || !*nonRoot:
				errs = append(errs, fmt.Errorf("%s container %s: runAsNonRoot must be true", w, c.Name))
			case user != nil && *user == 0:
				errs = append(errs, fmt.Errorf("%s container %s: runAsUser must not be 0", w, c.Name))
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				errs = append(errs, fmt.Errorf("%s container %s: readOnlyRootFilesystem must be true", w, c.Name))
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || (sc.Privileged != nil && *sc.Privileged) {
				errs = append(errs, fmt.Errorf("%s container %s: allowPrivilegeEscalation must be false and privileged unset", w, c.Name))
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				errs = append(errs, fmt.Errorf("%s container %s: capabilities must drop ALL and add none", w, c.Name))
			}
			if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				errs = append(errs, fmt.Errorf("%s container %s: seccompProfile must be RuntimeDefault", w, c.Name))
			}
		}
	}
	return errors.Join(errs...)
}

func checkDeployResources(b *deployBundle) error {
	var errs []error
	for _, w := range b.workloads() {
		for _, c := range slices.Concat(w.pod.InitContainers, w.pod.Containers) {
			req, lim := c.Resources.Requests, c.Resources.Limits
			if req.Cpu().IsZero() || req.Memory().IsZero() {
				errs = append(errs, fmt.Errorf("%s container %s: cpu and memory requests are required (scheduling, HPA)", w, c.Name))
			}
			if lim.Memory().IsZero() {
				errs = append(errs, fmt.Errorf("%s container %s: a memory limit is required", w, c.Name))
			} else if req.Memory().Cmp(*lim.Memory()) > 0 {
				errs = append(errs, fmt.Errorf("%s container %s: memory request above its limit", w, c.Name))
			}
			if c.Image == "" {
				errs = append(errs, fmt.Errorf("%s container %s: image is required", w, c.Name))
			}
		}
	}
	return errors.Join(errs...)
}

func checkDeployVolumes(b *deployBundle) error {
	var errs []error
	for _, w := range b.workloads() {
		vols := map[string]corev1.Volume{}
		for _, v := range w.pod.Volumes {
			vols[v.Name] = v
			switch {
			case v.ConfigMap != nil:
				cm, ok := b.configMaps[v.ConfigMap.Name]
				if !ok {
					errs = append(errs, fmt.Errorf("%s volume %s: no ConfigMap %q", w, v.Name, v.ConfigMap.Name))
					continue
				}
				for _, it := range v.ConfigMap.Items {
					if _, ok := cm.Data[it.Key]; !ok {
						errs = append(errs, fmt.Errorf("%s volume %s: ConfigMap %s has no key %q", w, v.Name, cm.Name, it.Key))
					}
				}
			case v.Secret != nil:
				s, ok := b.secrets[v.Secret.SecretName]
				if !ok && deployExternalSecrets[v.Secret.SecretName] {
					continue // created out of band, documented in deploy/k8s/README.md (checked below)
				}
				if !ok {
					errs = append(errs, fmt.Errorf("%s volume %s: no Secret %q", w, v.Name, v.Secret.SecretName))
					continue
				}
				for _, it := range v.Secret.Items {
					if _, ok := deploySecretData(s)[it.Key]; !ok {
						errs = append(errs, fmt.Errorf("%s volume %s: Secret %s has no key %q", w, v.Name, s.Name, it.Key))
					}
				}
			}
		}
		for _, c := range slices.Concat(w.pod.InitContainers, w.pod.Containers) {
			paths := map[string]bool{}
			for _, m := range c.VolumeMounts {
				if _, ok := vols[m.Name]; !ok && !slices.Contains(w.claims, m.Name) {
					errs = append(errs, fmt.Errorf("%s container %s: volumeMount %s has no volume", w, c.Name, m.Name))
				}
				if paths[m.MountPath] {
					errs = append(errs, fmt.Errorf("%s container %s: two mounts at %s", w, c.Name, m.MountPath))
				}
				paths[m.MountPath] = true
			}
		}
	}
	return errors.Join(errs...)
}

func checkDeployFlags(b *deployBundle) error {
	ps, err := b.programs()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, p := range ps {
		seen[p.program] = true
	}
	var errs []error
	for name := range deployPrograms {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("no workload runs %s", name))
		}
	}
	return errors.Join(errs...)
}

// checkDeployPorts requires every declared containerPort, probe and Service
// target to be a port the program actually listens on, and probes of the
// right kind: gRPC health for the decider, GET /readyz (readiness) and
// /healthz (liveness) for the edge, /livez,
// /readyz or /health on etcd's client port.
func checkDeployPorts(b *deployBundle) error {
	ps, _ := b.programs() // errors are checkDeployFlags'
	var errs []error
	listening := map[string]map[string]map[int32]bool{}
	for _, w := range b.workloads() {
		lp, err := b.listeningPorts(w, ps)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		listening[w.name] = lp
		for _, c := range w.pod.Containers {
			for _, port := range c.Ports {
				if !lp[c.Name][port.ContainerPort] {
					errs = append(errs, fmt.Errorf("%s container %s: containerPort %d (%s) is not a port it listens on %v", w, c.Name, port.ContainerPort, port.Name, deployPortList(lp[c.Name])))
				}
			}
		}
	}
	for _, p := range ps {
		probes := map[string]*corev1.Probe{"readinessProbe": p.container.ReadinessProbe, "livenessProbe": p.container.LivenessProbe}
		if p.container.StartupProbe != nil {
			probes["startupProbe"] = p.container.StartupProbe
		}
		for kind, pr := range probes {
			if pr == nil {
				errs = append(errs, fmt.Errorf("%s: %s is required", p, kind))
				continue
			}
			switch p.program {
			case "decider":
				switch {
				case pr.GRPC == nil:
					errs = append(errs, fmt.Errorf("%s: %s must be a grpc probe (grpc.health.v1)", p, kind))
				case pr.GRPC.Port != p.healthPort:
					errs = append(errs, fmt.Errorf("%s: %s checks port %d, the decider serves health on %d", p, kind, pr.GRPC.Port, p.healthPort))
				case pr.GRPC.Service != nil && *pr.GRPC.Service != "" && *pr.GRPC.Service != switchboardv1.RouterService_ServiceDesc.ServiceName &&
					*pr.GRPC.Service != switchboardv1.EdgeService_ServiceDesc.ServiceName && *pr.GRPC.Service != switchboardv1.OperatorService_ServiceDesc.ServiceName:
					errs = append(errs, fmt.Errorf("%s: %s asks for health of %q, which the decider does not report", p, kind, *pr.GRPC.Service))
				}
			case "edge":
				// Readiness says whether the edge can serve now; liveness
				// only that the process works (failing it restarts the pod).
				path := "/healthz"
				if kind == "readinessProbe" {
					path = "/readyz"
				}
				if pr.HTTPGet == nil || pr.HTTPGet.Path != path || (pr.HTTPGet.Scheme != "" && pr.HTTPGet.Scheme != corev1.URISchemeHTTP) {
					errs = append(errs, fmt.Errorf("%s: %s must be an HTTP GET of %s", p, kind, path))
					continue
				}
				// The API port or the admin listener: both answer /healthz and /readyz.
				port, ok := deployContainerPort(p.container, pr.HTTPGet.Port)
				if !ok {
					port = pr.HTTPGet.Port.IntVal
				}
				if port == 0 || (port != p.listenPort && port != p.debugPort) {
					errs = append(errs, fmt.Errorf("%s: %s checks port %s, the edge listens on %d (admin %d)", p, kind, pr.HTTPGet.Port.String(), p.listenPort, p.debugPort))
				}
			}
		}
	}
	for name, svc := range b.services {
		ws := b.selecting(svc.Spec.Selector)
		if len(ws) != 1 {
			errs = append(errs, fmt.Errorf("Service %s: selector %v must select exactly one workload, selects %d", name, svc.Spec.Selector, len(ws)))
			continue
		}
		w := ws[0]
		for _, sp := range svc.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			var resolved int32
			for i := range w.pod.Containers {
				c := &w.pod.Containers[i]
				if port, ok := deployContainerPort(c, target); ok && listening[w.name][c.Name][port] {
					resolved = port
				}
			}
			switch {
			case resolved == 0:
				errs = append(errs, fmt.Errorf("Service %s port %s: targetPort %s is not a declared port %s listens on", name, sp.Name, target.String(), w))
			case svc.Spec.ClusterIP == corev1.ClusterIPNone && sp.Port != resolved:
				errs = append(errs, fmt.Errorf("Service %s port %s: a headless Service's clients dial the pod directly, so port %d must equal the target %d", name, sp.Name, sp.Port, resolved))
			}
		}
	}
	return errors.Join(errs...)
}

func deployPortList(set map[int32]bool) []int32 {
	var out []int32
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// deployServiceFor resolves host:port to a Service of the bundle that
// selects a workload with deployNameLabel want and exposes port.
func (b *deployBundle) deployServiceFor(hostport, want string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	svc, ok := b.deployService(host)
	if !ok {
		return fmt.Errorf("%s is not a Service in namespace %s", host, deployNamespace)
	}
	ws := b.selecting(svc.Spec.Selector)
	if len(ws) != 1 || ws[0].labels[deployNameLabel] != want {
		return fmt.Errorf("Service %s does not select the %s pods", svc.Name, want)
	}
	for _, sp := range svc.Spec.Ports {
		if strconv.Itoa(int(sp.Port)) == port {
			return nil
		}
	}
	return fmt.Errorf("Service %s has no port %s", svc.Name, port)
}

func checkDeployWiring(b *deployBundle) error {
	ps, _ := b.programs() // errors are checkDeployFlags'
	var errs []error
	for _, p := range ps {
		switch cfg := p.cfg.(type) {
		case deciderapp.Config:
			if len(cfg.Etcd) == 0 {
				errs = append(errs, fmt.Errorf("%s: --etcd is empty, which starts an embedded etcd per replica", p))
			}
			for _, e := range cfg.Etcd {
				hostport := e
				if u, err := url.Parse(e); err == nil && u.Host != "" {
					hostport = u.Host
				}
				if err := b.deployServiceFor(hostport, "etcd"); err != nil {
					errs = append(errs, fmt.Errorf("%s: --etcd %s: %w", p, e, err))
				}
			}
		case edgeapp.Config:
			target := cfg.Decider
			if rest, ok := strings.CutPrefix(target, "dns:"); ok {
				// dns:///host:port or dns://resolver/host:port
				target = strings.TrimPrefix(rest, "//")
				_, target, _ = strings.Cut(target, "/")
			}
			if err := b.deployServiceFor(target, "decider"); err != nil {
				errs = append(errs, fmt.Errorf("%s: --decider %s: %w", p, cfg.Decider, err))
			}
		}
	}
	return errors.Join(errs...)
}

// checkDeployCatalog parses the catalog file the deciders read (--catalog,
// resolved through their volume mounts to a ConfigMap key) with
// catalog.Parse, and requires every api_key_env it names to reach every
// edge from a Secret.
func checkDeployCatalog(b *deployBundle) error {
	ps, _ := b.programs() // errors are checkDeployFlags'
	var errs []error
	credentials := map[string]bool{}
	for _, p := range ps {
		cfg, ok := p.cfg.(deciderapp.Config)
		if !ok {
			continue
		}
		if cfg.Catalog == "" {
			errs = append(errs, fmt.Errorf("%s: --catalog is required: the cluster has no catalog stored yet", p))
			continue
		}
		data, err := b.mountedFile(p.workload, p.container, cfg.Catalog)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: --catalog %s: %w", p, cfg.Catalog, err))
			continue
		}
		c, err := catalog.Parse([]byte(data))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: catalog %s: %w", p, cfg.Catalog, err))
			continue
		}
		for _, m := range c.Models {
			for _, e := range m.Endpoints {
				if e.APIKeyEnv != "" {
					credentials[e.APIKeyEnv] = true
				}
			}
		}
	}
	if len(credentials) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("the catalog names no api_key_env: nothing to check the edges' credentials against"))
	}
	for _, p := range ps {
		if p.program != "edge" {
			continue
		}
		var files map[string]bool // credentials in --provider-key-dir
		if dir := p.cfg.(edgeapp.Config).ProviderKeyDir; dir != "" {
			var err error
			if files, err = b.mountedSecretKeys(p.workload, p.container, dir); err != nil {
				errs = append(errs, fmt.Errorf("%s: --provider-key-dir %s: %w", p, dir, err))
			}
		}
		for _, name := range deploySorted(credentials) {
			if files[name] {
				continue
			}
			v, ok := p.env[name]
			switch {
			case !ok || v.value == "":
				errs = append(errs, fmt.Errorf("%s: the catalog's api_key_env %s is neither in --provider-key-dir nor in the environment (add it to Secret %s)", p, name, deployCredentialsSecret))
			case v.secret == "":
				errs = append(errs, fmt.Errorf("%s: %s must come from a Secret, not a literal value", p, name))
			}
		}
	}
	return errors.Join(errs...)
}

// mountedSecretKeys returns the files a Secret volume mounted at dir in
// container c of w holds: the Secret's keys (or the items it maps). A
// subPath mount is refused: its files never change, so a rotated
// credential would not reach the edge.
func (b *deployBundle) mountedSecretKeys(w deployWorkload, c *corev1.Container, dir string) (map[string]bool, error) {
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Clean(dir) {
			continue
		}
		if m.SubPath != "" {
			return nil, errors.New("mounted with subPath, which never sees a rotation")
		}
		for i := range w.pod.Volumes {
			v := &w.pod.Volumes[i]
			if v.Name != m.Name {
				continue
			}
			if v.Secret == nil {
				return nil, fmt.Errorf("volume %s is not a Secret", v.Name)
			}
			sec, ok := b.secrets[v.Secret.SecretName]
			if !ok {
				return nil, fmt.Errorf("no Secret %q", v.Secret.SecretName)
			}
			out := map[string]bool{}
			data := deploySecretData(sec)
			if len(v.Secret.Items) == 0 {
				for k := range data {
					out[k] = true
				}
			}
			for _, it := range v.Secret.Items {
				if _, ok := data[it.Key]; ok {
					out[it.Path] = true
				}
			}
			return out, nil
		}
		return nil, fmt.Errorf("no volume %q", m.Name)
	}
	return nil, errors.New("no volume is mounted there")
}

// mountedFile returns the content of path inside container c of w, which
// must be a ConfigMap key mounted there.
func (b *deployBundle) mountedFile(w deployWorkload, c *corev1.Container, path string) (string, error) {
	for _, m := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range w.pod.Volumes {
			if w.pod.Volumes[i].Name == m.Name {
				vol = &w.pod.Volumes[i]
			}
		}
		if vol == nil || vol.ConfigMap == nil {
			continue
		}
		cm, ok := b.configMaps[vol.ConfigMap.Name]
		if !ok {
			return "", fmt.Errorf("no ConfigMap %q", vol.ConfigMap.Name)
		}
		// key -> path inside the volume
		files := map[string]string{}
		if len(vol.ConfigMap.Items) == 0 {
			for k := range cm.Data {
				files[k] = k
			}
		}
		for _, it := range vol.ConfigMap.Items {
			files[it.Path] = it.Key
		}
		for rel, key := range files {
			full := filepath.Join(m.MountPath, rel)
			if m.SubPath != "" {
				if m.SubPath != rel {
					continue
				}
				full = m.MountPath
			}
			if full == path {
				data, ok := cm.Data[key]
				if !ok {
					return "", fmt.Errorf("ConfigMap %s has no key %q", cm.Name, key)
				}
				return data, nil
			}
		}
	}
	return "", errors.New("not a ConfigMap file mounted in the container")
}

func checkDeployPlaceholders(b *deployBundle) error {
	s, ok := b.secrets[deployCredentialsSecret]
	if !ok {
		return fmt.Errorf("no Secret %s", deployCredentialsSecret)
	}
	var errs []error
	data := deploySecretData(s)
	if len(data) == 0 {
		errs = append(errs, fmt.Errorf("Secret %s has no keys", s.Name))
	}
	for k, v := range data {
		if !strings.HasPrefix(v, deployPlaceholder) {
			errs = append(errs, fmt.Errorf("Secret %s key %s: committed values must be placeholders starting with %s", s.Name, k, deployPlaceholder))
		}
	}
	return errors.Join(errs...)
}

func checkDeployGrace(b *deployBundle) error {
	ps, _ := b.programs() // errors are checkDeployFlags'
	var errs []error
	for _, p := range ps {
		grace := 30 * time.Second // the API's default
		if g := p.workload.pod.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		var drain, need time.Duration
		switch cfg := p.cfg.(type) {
		case deciderapp.Config:
			drain, need = cfg.DrainDelay, cfg.DrainDelay+cfg.ShutdownTimeout
		case edgeapp.Config:
			drain, need = cfg.DrainDelay, cfg.DrainDelay+cfg.ShutdownGrace
		}
		if drain <= 0 {
			// A Service drops a terminating pod asynchronously: without a
			// drain delay the listener closes while traffic still arrives.
			errs = append(errs, fmt.Errorf("%s: --drain-delay must be positive in a cluster", p))
		}
		if grace <= need {
			errs = append(errs, fmt.Errorf("%s: terminationGracePeriodSeconds %s must exceed the program's shutdown (%s), or it is killed mid-drain", p, grace, need))
		}
	}
	return errors.Join(errs...)
}

// checkDeployEtcd requires each etcd StatefulSet to start a cluster whose
// --initial-cluster lists exactly its replicas, by their stable DNS names
// through the StatefulSet's headless Service, each matching what that member
// advertises.
func checkDeployEtcd(b *deployBundle) error {
	var errs []error
	var etcds []*appsv1.StatefulSet
	for _, sts := range b.statefulSets {
		if sts.Spec.Template.Labels[deployNameLabel] == "etcd" {
			etcds = append(etcds, sts)
		}
	}
	if len(etcds) != 1 {
		return fmt.Errorf("%d etcd StatefulSets, want 1", len(etcds))
	}
	for _, sts := range etcds {
		w := fmt.Sprintf("StatefulSet %s", sts.Name)
		replicas := deployReplicas(sts.Spec.Replicas)
		if replicas < 3 || replicas%2 == 0 {
			errs = append(errs, fmt.Errorf("%s: replicas %d: an odd number of at least 3 survives losing a member", w, replicas))
		}
		if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			errs = append(errs, fmt.Errorf("%s: podManagementPolicy must be Parallel: with OrderedReady the first member waits for a quorum that is never started", w))
		}
		svc, ok := b.services[sts.Spec.ServiceName]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: serviceName %q is not a Service", w, sts.Spec.ServiceName))
		case svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses:
			errs = append(errs, fmt.Errorf("%s: Service %s must be headless with publishNotReadyAddresses, so members resolve each other before they are ready", w, svc.Name))
		}
		if len(sts.Spec.Template.Spec.Containers) != 1 {
			errs = append(errs, fmt.Errorf("%s: one container expected", w))
			continue
		}
		c := &sts.Spec.Template.Spec.Containers[0]
		if tag := c.Image[strings.LastIndex(c.Image, ":")+1:]; !strings.Contains(c.Image, ":") || tag == "latest" || strings.Contains(tag, "/") {
			errs = append(errs, fmt.Errorf("%s: image %s must be pinned to a version", w, c.Image))
		}
		args, err := deployArgs(c.Args)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w, err))
			continue
		}
		peerPort, err := deployURLPort(args["listen-peer-urls"])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: --listen-peer-urls: %w", w, err))
		}
		clientPort, err := deployURLPort(args["listen-client-urls"])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: --listen-client-urls: %w", w, err))
		}
		// Clients and peers must prove who they are: TLS with client
		// certificates on both listeners.
		for _, l := range []struct{ urls, auth, ca string }{
			{"listen-client-urls", "client-cert-auth", "trusted-ca-file"},
			{"listen-peer-urls", "peer-client-cert-auth", "peer-trusted-ca-file"},
		} {
			if !strings.HasPrefix(args[l.urls], "https://") || args[l.auth] != "true" || args[l.ca] == "" {
				errs = append(errs, fmt.Errorf("%s: --%s must be https with --%s and --%s", w, l.urls, l.auth, l.ca))
			}
		}
		// Probes cannot present a client certificate: they use the plain
		// metrics listener when there is one.
		probePort, probeWhat := clientPort, "the client port"
		if m := args["listen-metrics-urls"]; m != "" {
			if probePort, err = deployURLPort(m); err != nil {
				errs = append(errs, fmt.Errorf("%s: --listen-metrics-urls: %w", w, err))
			}
			probeWhat = "the metrics port"
		}
		for kind, pr := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
			if pr == nil || pr.HTTPGet == nil || !slices.Contains([]string{"/health", "/livez", "/readyz"}, pr.HTTPGet.Path) {
				errs = append(errs, fmt.Errorf("%s: %s must GET /livez, /readyz or /health", w, kind))
				continue
			}
			if port, ok := deployContainerPort(c, pr.HTTPGet.Port); !ok || port != probePort {
				errs = append(errs, fmt.Errorf("%s: %s must use %s %d", w, kind, probeWhat, probePort))
			}
		}
		scheme, _, _ := strings.Cut(args["listen-peer-urls"], "://")
		members := map[string]string{}
		for entry := range strings.SplitSeq(args["initial-cluster"], ",") {
			name, u, ok := strings.Cut(entry, "=")
			if !ok {
				errs = append(errs, fmt.Errorf("%s: --initial-cluster entry %q is not name=url", w, entry))
				continue
			}
			members[name] = u
		}
		if len(members) != int(replicas) {
			errs = append(errs, fmt.Errorf("%s: --initial-cluster lists %d members, replicas is %d", w, len(members), replicas))
		}
		for i := range replicas {
			pod := fmt.Sprintf("%s-%d", sts.Name, i)
			want := fmt.Sprintf("%s://%s.%s.%s.svc:%d", scheme, pod, sts.Spec.ServiceName, sts.Namespace, peerPort)
			got, ok := members[pod]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s: --initial-cluster has no member %s", w, pod))
				continue
			case got != want && got != strings.Replace(want, ".svc:", ".svc.cluster.local:", 1):
				errs = append(errs, fmt.Errorf("%s: --initial-cluster member %s is %s, want its StatefulSet DNS name %s", w, pod, got, want))
			}
			env, err := b.containerEnv(pod, c)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", w, err))
				continue
			}
			if name := deployExpand(args["name"], env); name != pod {
				errs = append(errs, fmt.Errorf("%s: pod %s would run as member --name=%s", w, pod, name))
			}
			if adv := deployExpand(args["initial-advertise-peer-urls"], env); adv != got {
				errs = append(errs, fmt.Errorf("%s: pod %s advertises %s, --initial-cluster says %s", w, pod, adv, got))
			}
			if adv := deployExpand(args["advertise-client-urls"], env); adv != strings.Replace(got, fmt.Sprintf(":%d", peerPort), fmt.Sprintf(":%d", clientPort), 1) {
				errs = append(errs, fmt.Errorf("%s: pod %s advertises client URL %s, not its own DNS name on port %d", w, pod, adv, clientPort))
			}
		}
	}
	return errors.Join(errs...)
}

// checkDeployPDBs requires every workload to have exactly one budget that
// still allows an eviction, and etcd's to keep a quorum.
func checkDeployPDBs(b *deployBundle) error {
	var errs []error
	covered := map[string]int{}
	for name, pdb := range b.pdbs {
		if pdb.Spec.Selector == nil || len(pdb.Spec.Selector.MatchExpressions) > 0 {
			errs = append(errs, fmt.Errorf("PodDisruptionBudget %s: selector must be matchLabels only", name))
			continue
		}
		ws := b.selecting(pdb.Spec.Selector.MatchLabels)
		if len(ws) != 1 {
			errs = append(errs, fmt.Errorf("PodDisruptionBudget %s: selects %d workloads, want exactly one", name, len(ws)))
			continue
		}
		w := ws[0]
		covered[w.String()]++
		replicas := w.replicas
		if hpa := b.hpaFor(w.name); hpa != nil && hpa.Spec.MinReplicas != nil {
			replicas = *hpa.Spec.MinReplicas
		}
		minA, maxU := pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable
		switch {
		case (minA == nil) == (maxU == nil):
			errs = append(errs, fmt.Errorf("PodDisruptionBudget %s: set exactly one of minAvailable and maxUnavailable", name))
		case w.labels[deployNameLabel] == "etcd" && (minA == nil || minA.Type != intstr.Int || minA.IntVal != replicas/2+1):
			errs = append(errs, fmt.Errorf("PodDisruptionBudget %s: minAvailable must be the quorum, %d of %d", name, replicas/2+1, replicas))
		case minA != nil && minA.Type == intstr.Int && minA.IntVal >= replicas,
			minA != nil && minA.Type == intstr.String && minA.StrVal == "100%",
			maxU != nil && maxU.Type == intstr.Int && maxU.IntVal < 1,
			maxU != nil && maxU.Type == intstr.String && maxU.StrVal == "0%":
			errs = append(errs, fmt.Errorf("PodDisruptionBudget %s: allows no eviction with %d replicas, which blocks node drains", name, replicas))
		}
	}
	for _, w := range b.workloads() {
		if covered[w.String()] != 1 {
			errs = append(errs, fmt.Errorf("%s: covered by %d PodDisruptionBudgets, want 1", w, covered[w.String()]))
		}
	}
	return errors.Join(errs...)
}

func (b *deployBundle) hpaFor(deployment string) *autoscalingv2.HorizontalPodAutoscaler {
	for _, h := range b.hpas {
		if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == deployment {
			return h
		}
	}
	return nil
}

// checkDeployEdges requires one autoscaled Deployment per region whose
// region label is its --region, and a decider with at least two replicas.
func checkDeployEdges(b *deployBundle) error {
	ps, _ := b.programs() // errors are checkDeployFlags'
	var errs []error
	regions := map[string]string{}
	for _, p := range ps {
		switch cfg := p.cfg.(type) {
		case deciderapp.Config:
			if p.workload.replicas < 2 {
				errs = append(errs, fmt.Errorf("%s: at least 2 replicas", p.workload))
			}
		case edgeapp.Config:
			if other, dup := regions[cfg.Region]; dup && other != p.workload.name {
				errs = append(errs, fmt.Errorf("%s: region %s is also served by %s", p.workload, cfg.Region, other))
			}
			regions[cfg.Region] = p.workload.name
			if got := p.workload.labels[deployRegionLabel]; got != cfg.Region {
				errs = append(errs, fmt.Errorf("%s: --region %s but pod label %s=%s", p.workload, cfg.Region, deployRegionLabel, got))
			}
			if d, ok := b.deployments[p.workload.name]; !ok || d.Spec.Replicas != nil {
				errs = append(errs, fmt.Errorf("%s: a Deployment without replicas, the HorizontalPodAutoscaler owns it", p.workload))
			}
			h := b.hpaFor(p.workload.name)
			if h == nil {
				errs = append(errs, fmt.Errorf("%s: no HorizontalPodAutoscaler", p.workload))
				continue
			}
			if err := checkDeployEdgeHPA(h, b.spec.production); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for name, h := range b.hpas {
		if t := h.Spec.ScaleTargetRef; t.APIVersion != "apps/v1" || t.Kind != "Deployment" || b.deployments[t.Name] == nil {
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: scaleTargetRef %s %s/%s is not a Deployment here", name, t.APIVersion, t.Kind, t.Name))
		}
	}
	if got := deploySorted(deployKeys(regions)); !slices.Equal(got, b.spec.regions) {
		errs = append(errs, fmt.Errorf("edges serve regions %v, overlay %s must serve %v", got, b.overlay, b.spec.regions))
	}
	return errors.Join(errs...)
}

// checkDeployExternalSecrets requires every Secret created out of band to be
// mounted somewhere and explained in deploy/k8s/README.md.
func checkDeployExternalSecrets(b *deployBundle) error {
	readme, err := os.ReadFile(filepath.Join(deployDir, "README.md"))
	if err != nil {
		return err
	}
	mounted := map[string]bool{}
	for _, w := range b.workloads() {
		for _, v := range w.pod.Volumes {
			if v.Secret != nil {
				mounted[v.Secret.SecretName] = true
			}
		}
	}
	var errs []error
	for _, name := range deploySorted(deployExternalSecrets) {
		if !mounted[name] {
			errs = append(errs, fmt.Errorf("Secret %s is listed as external but no workload mounts it", name))
		}
		if !bytes.Contains(readme, []byte("secret generic "+name+" ")) && !bytes.Contains(readme, []byte("secret tls "+name+" ")) {
			errs = append(errs, fmt.Errorf("deploy/k8s/README.md does not say how to create Secret %s", name))
		}
	}
	return errors.Join(errs...)
}

// checkDeployScrape requires every program (decider, edge) to serve its
// admin listener on a declared port, and its pod's Prometheus annotations
// (prometheus.io/scrape, port, path) to name that port and /metrics.
func checkDeployScrape(b *deployBundle) error {
	ps, _ := b.programs() // errors are checkDeployFlags'
	var errs []error
	for _, p := range ps {
		if p.debugPort == 0 {
			errs = append(errs, fmt.Errorf("%s: no admin listener (--admin-listen=0.0.0.0:PORT): nothing serves its metrics", p))
			continue
		}
		declared := false
		for _, cp := range p.container.Ports {
			declared = declared || cp.ContainerPort == p.debugPort
		}
		if !declared {
			errs = append(errs, fmt.Errorf("%s: the admin listener's port %d is no containerPort", p, p.debugPort))
		}
		a := p.workload.annots
		switch {
		case a["prometheus.io/scrape"] != "true":
			errs = append(errs, fmt.Errorf("%s: pod annotation prometheus.io/scrape must be \"true\"", p))
		case a["prometheus.io/port"] != strconv.Itoa(int(p.debugPort)):
			errs = append(errs, fmt.Errorf("%s: pod annotation prometheus.io/port %s is not its admin listener's %d", p, a["prometheus.io/port"], p.debugPort))
		case a["prometheus.io/path"] != "/metrics":
			errs = append(errs, fmt.Errorf("%s: pod annotation prometheus.io/path %q must be /metrics", p, a["prometheus.io/path"]))
		}
	}
	return errors.Join(errs...)
}
