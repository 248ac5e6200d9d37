package check

import (
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// What the rules below hold the manifests to. Each is stated in a comment of the
// manifests; the sidecar's defaults are the ones `sidecar serve --help` prints.
const (
	sidecarName       = "fanout" // the sidecar's container
	appLabel          = "app.kubernetes.io/name"
	readinessService  = "fanout.v1.FanoutService" // grpc.health.v1: synced and not draining
	livenessService   = ""                        // grpc.health.v1: the process is up
	defaultShutdown   = 10 * time.Second          // --shutdown-timeout
	defaultSyncWait   = 30 * time.Second          // --sync-timeout
	defaultPeerAddr   = "0.0.0.0:7071"            // --peer-addr
	defaultAdminAddr  = "0.0.0.0:9090"            // --admin-addr
	defaultStateKeys  = 1000000                   // --state-max-keys
	defaultStateBytes = 512 << 20                 // --state-max-bytes
	// Bytes the state table takes per key beside the event's own bytes
	// (docs/BENCHMARKS.md, "The state table": ~105 B), with room to spare.
	stateBytesPerKey = 128
)

// bundle is what one kustomization renders, by kind.
type bundle struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	serviceAccounts []*corev1.ServiceAccount
	netpols         []*networkingv1.NetworkPolicy
	pdbs            []*policyv1.PodDisruptionBudget
	podMonitors     []*monitoringv1.PodMonitor
	issuers         []*cmIssuer
	certificates    []*cmCertificate
}

func newBundle(t testing.TB, docs []document) *bundle {
	t.Helper()
	b := &bundle{}
	for _, d := range docs {
		switch o := d.obj.(type) {
		case *appsv1.Deployment:
			b.deployments = append(b.deployments, o)
		case *corev1.Service:
			b.services = append(b.services, o)
		case *corev1.ServiceAccount:
			b.serviceAccounts = append(b.serviceAccounts, o)
		case *networkingv1.NetworkPolicy:
			b.netpols = append(b.netpols, o)
		case *policyv1.PodDisruptionBudget:
			b.pdbs = append(b.pdbs, o)
		case *monitoringv1.PodMonitor:
			b.podMonitors = append(b.podMonitors, o)
		case *cmIssuer:
			b.issuers = append(b.issuers, o)
		case *cmCertificate:
			b.certificates = append(b.certificates, o)
		case nil:
		default:
			t.Fatalf("%s: no rule knows %T", d.where, o)
		}
	}
	return b
}

// renderedBundles renders every kustomization under deploy/kubernetes.
func renderedBundles(t testing.TB) map[string]*bundle {
	t.Helper()
	out := map[string]*bundle{}
	for _, dir := range kustomizationDirs(t) {
		rel, _ := filepath.Rel(manifestsDir(t), dir)
		out[rel] = newBundle(t, render(t, dir))
	}
	return out
}

// TestManifestRules checks the rules on what each kustomization renders.
func TestManifestRules(t *testing.T) {
	for name, b := range renderedBundles(t) {
		t.Run(name, func(t *testing.T) {
			for _, p := range b.check() {
				t.Error(p)
			}
		})
	}
}

// problems collects what a check found.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// sidecarOf finds the sidecar's container in a pod spec: the init container named
// sidecarName. It also says if a regular container has that name.
func sidecarOf(spec *corev1.PodSpec) (*corev1.Container, string) {
	for i := range spec.Containers {
		if spec.Containers[i].Name == sidecarName {
			return nil, fmt.Sprintf("container %q is a regular container: make it an init container with restartPolicy: Always (a native sidecar), so that it starts before the app and stops after it", sidecarName)
		}
	}
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == sidecarName {
			return &spec.InitContainers[i], ""
		}
	}
	return nil, fmt.Sprintf("no init container %q (the sidecar)", sidecarName)
}

// envOf returns the sidecar's literal env values, and its env entries by name.
func envOf(c *corev1.Container) (map[string]string, map[string]corev1.EnvVar) {
	vals, vars := map[string]string{}, map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		vars[e.Name] = e
		if e.ValueFrom == nil {
			vals[e.Name] = e.Value
		}
	}
	return vals, vars
}

// setting is a serve setting's value in the container: its FANOUT_* variable, or a
// --flag=value argument, or def.
func setting(c *corev1.Container, env map[string]string, flag, def string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			return v
		}
	}
	if v, ok := env[envName(flag)]; ok {
		return v
	}
	return def
}

// envName is the variable that sets a flag: FANOUT_<FLAG>, upper case, - → _ (as
// cmd/sidecar's envName).
func envName(flag string) string {
	return "FANOUT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func containerPort(c *corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// listenPort is the port of a host:port listen address, and whether the host lets
// other pods (and the kubelet) reach it: not loopback.
func listenPort(addr string) (port int32, reachable bool, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false, err
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return 0, false, err
	}
	ip := net.ParseIP(host)
	loop := host == "localhost" || (ip != nil && ip.IsLoopback())
	return int32(n), !loop, nil
}

func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// probeBudget is how long a probe lets a container take before it fails it.
func probeBudget(p *corev1.Probe) time.Duration {
	period, failures := p.PeriodSeconds, p.FailureThreshold
	if period == 0 {
		period = 10
	}
	if failures == 0 {
		failures = 3
	}
	return time.Duration(p.InitialDelaySeconds+period*failures) * time.Second
}

func (b *bundle) check() problems {
	var p problems
	if len(b.deployments) != 1 {
		p.add("want one Deployment, got %d", len(b.deployments))
		return p
	}
	d := b.deployments[0]
	spec := &d.Spec.Template.Spec
	podLabels := d.Spec.Template.Labels
	where := "Deployment " + d.Name
	if podLabels[appLabel] == "" {
		p.add("%s: the pod template has no %s label", where, appLabel)
	}
	if !selects(d.Spec.Selector, podLabels) {
		p.add("%s: spec.selector does not select its own pod template's labels", where)
	}
	sc, msg := sidecarOf(spec)
	if sc == nil {
		p.add("%s: %s", where, msg)
		return p
	}
	where += ", sidecar " + sc.Name
	env, vars := envOf(sc)

	// A native sidecar.
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		p.add("%s: restartPolicy must be Always (a native sidecar: an init container without it blocks the pod's start forever)", where)
	}
	if len(spec.Containers) == 0 {
		p.add("%s: no app container", where)
	}

	// Its settings: FANOUT_* variables the sidecar reads, or flags. The variables' names
	// are checked against the binary in sidecar_test.go.
	if len(sc.EnvFrom) > 0 {
		p.add("%s: envFrom hides which variables the sidecar gets; list them in env", where)
	}
	if len(sc.Command) > 0 {
		p.add("%s: command replaces the image's entrypoint (/sidecar serve); set args or env instead", where)
	}
	for _, e := range sc.Env {
		if !strings.HasPrefix(e.Name, "FANOUT_") {
			p.add("%s: env %s is not a FANOUT_* variable: the sidecar reads only those", where, e.Name)
		}
	}
	if v, ok := vars["FANOUT_NODE_ID"]; !ok || v.ValueFrom == nil || v.ValueFrom.FieldRef == nil || v.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		p.add("%s: FANOUT_NODE_ID must come from the pod's name (valueFrom.fieldRef.fieldPath: metadata.name)", where)
	}

	// Ports: the admin and peer listeners are where the container ports, the probes,
	// the Service, the NetworkPolicy and the PodMonitor say.
	// On the JetStream transport there is no peer listener: no peer port.
	jetstream := setting(sc, env, "transport", "mesh") == "jetstream"
	adminPort, adminOK := containerPort(sc, "admin")
	_, peerOK := containerPort(sc, "peer")
	listeners := []struct{ flag, def, port string }{{"admin-addr", defaultAdminAddr, "admin"}, {"peer-addr", defaultPeerAddr, "peer"}}
	switch {
	case jetstream && (!adminOK || peerOK || len(sc.Ports) != 1):
		p.add("%s: on --transport=jetstream want the one container port admin (no peer listener), got %v", where, sc.Ports)
	case !jetstream && (!adminOK || !peerOK):
		p.add("%s: want container ports named admin and peer, got %v", where, sc.Ports)
	}
	if jetstream {
		listeners = listeners[:1]
	}
	for _, l := range listeners {
		addr := setting(sc, env, l.flag, l.def)
		n, reachable, err := listenPort(addr)
		want, _ := containerPort(sc, l.port)
		switch {
		case err != nil:
			p.add("%s: --%s %q: %v", where, l.flag, addr, err)
		case !reachable:
			p.add("%s: --%s %q listens on loopback only: nothing outside the pod (kubelet, peers, Prometheus) reaches it", where, l.flag, addr)
		case n != want:
			p.add("%s: --%s %q listens on port %d, but container port %q is %d", where, l.flag, addr, n, l.port, want)
		}
	}

	// Probes: gRPC health on the admin port.
	for _, pr := range []struct {
		name    string
		probe   *corev1.Probe
		service string
	}{{"startupProbe", sc.StartupProbe, readinessService}, {"readinessProbe", sc.ReadinessProbe, readinessService}, {"livenessProbe", sc.LivenessProbe, livenessService}} {
		switch {
		case pr.probe == nil:
			p.add("%s: no %s", where, pr.name)
		case pr.probe.GRPC == nil:
			p.add("%s: %s must be a gRPC health check (grpc:), on the admin port", where, pr.name)
		case pr.probe.GRPC.Port != adminPort:
			p.add("%s: %s calls port %d, the admin port is %d", where, pr.name, pr.probe.GRPC.Port, adminPort)
		case ptrOr(pr.probe.GRPC.Service, "") != pr.service:
			p.add("%s: %s asks for service %q, want %q", where, pr.name, ptrOr(pr.probe.GRPC.Service, ""), pr.service)
		}
	}
	if sc.StartupProbe != nil {
		sync, err := time.ParseDuration(setting(sc, env, "sync-timeout", defaultSyncWait.String()))
		if err != nil {
			p.add("%s: --sync-timeout: %v", where, err)
		} else if b := probeBudget(sc.StartupProbe); b <= sync {
			p.add("%s: startupProbe allows %v, not more than --sync-timeout %v: a pod whose peers are slow would be restarted before it reports ready", where, b, sync)
		}
	}

	// Shutdown: the grace period covers the sidecar's drain.
	shutdown, err := time.ParseDuration(setting(sc, env, "shutdown-timeout", defaultShutdown.String()))
	if err != nil {
		p.add("%s: --shutdown-timeout: %v", where, err)
	}
	grace := 30 * time.Second // Kubernetes' default
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if grace <= shutdown {
		p.add("%s: terminationGracePeriodSeconds (%v) must be above --shutdown-timeout (%v), or the kubelet kills the sidecar while it drains", where, grace, shutdown)
	}

	// Security: every container, the sidecar's and the app's.
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		p.add("%s: automountServiceAccountToken must be false: nothing in the pod calls the Kubernetes API", where)
	}
	if !slices.ContainsFunc(b.serviceAccounts, func(a *corev1.ServiceAccount) bool { return a.Name == spec.ServiceAccountName }) {
		p.add("%s: serviceAccountName %q is not among the manifests' ServiceAccounts", where, spec.ServiceAccountName)
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range allContainers(spec) {
		cw := fmt.Sprintf("Deployment %s, container %s", d.Name, c.Name)
		csc := c.SecurityContext
		if csc == nil {
			p.add("%s: no securityContext", cw)
			continue
		}
		if !ptrOr(csc.RunAsNonRoot, ptrOr(psc.RunAsNonRoot, false)) {
			p.add("%s: runAsNonRoot must be true (here or in the pod's securityContext)", cw)
		}
		if uid := ptrOr(csc.RunAsUser, ptrOr(psc.RunAsUser, -1)); uid == 0 {
			p.add("%s: runs as user 0", cw)
		}
		if !ptrOr(csc.ReadOnlyRootFilesystem, false) {
			p.add("%s: readOnlyRootFilesystem must be true", cw)
		}
		if ptrOr(csc.AllowPrivilegeEscalation, true) {
			p.add("%s: allowPrivilegeEscalation must be false", cw)
		}
		if ptrOr(csc.Privileged, false) {
			p.add("%s: privileged", cw)
		}
		if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0 {
			p.add("%s: capabilities must drop ALL and add none", cw)
		}
		seccomp := psc.SeccompProfile
		if csc.SeccompProfile != nil {
			seccomp = csc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			p.add("%s: seccompProfile must be RuntimeDefault (here or in the pod's securityContext)", cw)
		}
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			p.add("%s: no memory limit", cw)
		}
	}

	// Resources: the sidecar's memory limit is what --memory-limit auto takes 90 % of,
	// and the state table's bounds must leave room in it.
	req, lim := sc.Resources.Requests, sc.Resources.Limits
	if _, ok := req[corev1.ResourceCPU]; !ok {
		p.add("%s: no CPU request", where)
	}
	memLimit, ok := lim[corev1.ResourceMemory]
	if memReq, okReq := req[corev1.ResourceMemory]; !ok || !okReq || memReq.Cmp(memLimit) > 0 {
		p.add("%s: want a memory request and a memory limit at least as large, got requests %v limits %v", where, req, lim)
	}
	if m := setting(sc, env, "memory-limit", "auto"); m != "auto" {
		p.add("%s: --memory-limit %q: leave it at auto, so that Go's heap limit follows the container's memory limit", where, m)
	}
	if ok {
		keys, err1 := strconv.ParseInt(setting(sc, env, "state-max-keys", strconv.Itoa(defaultStateKeys)), 10, 64)
		bytes, err2 := strconv.ParseInt(setting(sc, env, "state-max-bytes", strconv.Itoa(defaultStateBytes)), 10, 64)
		if err1 != nil || err2 != nil {
			p.add("%s: --state-max-keys / --state-max-bytes: %v %v", where, err1, err2)
		} else if need := bytes + keys*stateBytesPerKey; need > memLimit.Value()/2 {
			p.add("%s: a full state table takes up to %d MiB (--state-max-bytes %d + --state-max-keys %d × %d B), more than half the memory limit %s: lower the bounds (FANOUT_STATE_MAX_BYTES, FANOUT_STATE_MAX_KEYS) or raise the limit", where, need>>20, bytes, keys, stateBytesPerKey, memLimit.String())
		}
	}

	if jetstream {
		b.checkJetStream(&p, spec, sc, env, podLabels)
	} else {
		b.checkPeersService(&p, sc, env, podLabels)
	}
	b.checkNetworkPolicy(&p, sc, podLabels, jetstream)
	b.checkPodMonitor(&p, sc, podLabels)
	b.checkPDB(&p, podLabels)
	b.checkPeerTLS(&p, spec, sc, env)
	return p
}

func allContainers(spec *corev1.PodSpec) []*corev1.Container {
	var cs []*corev1.Container
	for i := range spec.InitContainers {
		cs = append(cs, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		cs = append(cs, &spec.Containers[i])
	}
	return cs
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// checkPeersService: FANOUT_PEERS_DNS names a headless Service of the pods' peer port
// that lists not-ready pods too.
func (b *bundle) checkPeersService(p *problems, sc *corev1.Container, env map[string]string, podLabels map[string]string) {
	dns := setting(sc, env, "peers-dns", "")
	if dns == "" {
		p.add("sidecar: no FANOUT_PEERS_DNS: the sidecars would not find each other")
		return
	}
	var svcName, portName string
	var portNum int32
	if strings.HasPrefix(dns, "_") {
		// SRV: _<port name>._<proto>.<service>.<namespace>...
		l := strings.Split(dns, ".")
		if len(l) < 3 || l[1] != "_tcp" {
			p.add("sidecar: FANOUT_PEERS_DNS %q: want _<port name>._tcp.<service>...", dns)
			return
		}
		portName, svcName = strings.TrimPrefix(l[0], "_"), l[2]
	} else {
		host, port, err := net.SplitHostPort(dns)
		n, err2 := strconv.ParseUint(port, 10, 16)
		if err != nil || err2 != nil {
			p.add("sidecar: FANOUT_PEERS_DNS %q: want name:port (%v %v)", dns, err, err2)
			return
		}
		svcName, portNum = strings.Split(host, ".")[0], int32(n)
	}
	var svc *corev1.Service
	for _, s := range b.services {
		if s.Name == svcName {
			svc = s
		}
	}
	if svc == nil {
		p.add("sidecar: FANOUT_PEERS_DNS %q names Service %q, which the manifests do not have", dns, svcName)
		return
	}
	w := "Service " + svc.Name
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		p.add("%s: clusterIP must be None (headless): its DNS name must return every pod's address, not one virtual IP", w)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		p.add("%s: publishNotReadyAddresses must be true: a starting sidecar must find its peers (and they it) before it is ready", w)
	}
	if !selects(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, podLabels) {
		p.add("%s: its selector %v does not select the Deployment's pods %v", w, svc.Spec.Selector, podLabels)
	}
	peerPort, _ := containerPort(sc, "peer")
	found := false
	for _, sp := range svc.Spec.Ports {
		if (portName != "" && sp.Name == portName) || (portNum != 0 && sp.Port == portNum) {
			found = true
			if sp.Name != "peer" {
				p.add("%s: port %d should be named peer (the SRV name _peer._tcp...)", w, sp.Port)
			}
			if tp := sp.TargetPort; !(tp.Type == intstr.String && tp.StrVal == "peer") && !(tp.Type == intstr.Int && tp.IntVal == peerPort) && !(tp.IntVal == 0 && tp.StrVal == "" && sp.Port == peerPort) {
				p.add("%s: port %s targets %s, not the sidecar's peer port %d", w, sp.Name, tp.String(), peerPort)
			}
		}
	}
	if !found {
		p.add("%s: has no port matching FANOUT_PEERS_DNS %q", w, dns)
	}
}

// checkNetworkPolicy: a policy selects the pods, and lets only pods with the same app
// label reach the peer port.
func (b *bundle) checkNetworkPolicy(p *problems, sc *corev1.Container, podLabels map[string]string, jetstream bool) {
	peerPort, _ := containerPort(sc, "peer")
	isPeer := func(np networkingv1.NetworkPolicyPort) bool {
		if np.Port == nil {
			return true // every port
		}
		if np.Port.Type == intstr.String {
			return np.Port.StrVal == "peer"
		}
		end := ptrOr(np.EndPort, np.Port.IntVal)
		return np.Port.IntVal <= peerPort && peerPort <= end
	}
	selected := 0
	for _, np := range b.netpols {
		if !selects(&np.Spec.PodSelector, podLabels) {
			continue
		}
		selected++
		w := "NetworkPolicy " + np.Name
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			p.add("%s: policyTypes must include Ingress", w)
		}
		peerRules := 0
		for i, r := range np.Spec.Ingress {
			if jetstream { // no peer port: every rule names its ports, and none is "peer"
				if len(r.Ports) == 0 || slices.ContainsFunc(r.Ports, func(np networkingv1.NetworkPolicyPort) bool {
					return np.Port == nil || np.Port.StrVal == "peer"
				}) {
					p.add("%s: ingress[%d] opens a peer port (or every port): on --transport=jetstream there is none", w, i)
				}
				continue
			}
			if len(r.Ports) > 0 && !slices.ContainsFunc(r.Ports, isPeer) {
				continue
			}
			peerRules++
			if len(r.From) == 0 {
				p.add("%s: ingress[%d] opens the peer port to everyone", w, i)
			}
			for j, f := range r.From {
				if f.IPBlock != nil || f.NamespaceSelector != nil || f.PodSelector == nil {
					p.add("%s: ingress[%d].from[%d] opens the peer port beyond this namespace's fanout pods", w, i, j)
				} else if !selects(f.PodSelector, podLabels) || f.PodSelector.MatchLabels[appLabel] != podLabels[appLabel] {
					p.add("%s: ingress[%d].from[%d] must select the pods by their %s label", w, i, j, appLabel)
				}
			}
		}
		if peerRules == 0 && !jetstream {
			p.add("%s: no ingress rule lets the peers reach the peer port", w)
		}
	}
	if selected == 0 {
		p.add("no NetworkPolicy selects the Deployment's pods")
	}
}

func (b *bundle) checkPodMonitor(p *problems, sc *corev1.Container, podLabels map[string]string) {
	if len(b.podMonitors) != 1 {
		p.add("want one PodMonitor, got %d", len(b.podMonitors))
		return
	}
	pm := b.podMonitors[0]
	w := "PodMonitor " + pm.Name
	if !selects(&pm.Spec.Selector, podLabels) {
		p.add("%s: its selector does not select the Deployment's pods", w)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		p.add("%s: want one endpoint, got %d", w, len(pm.Spec.PodMetricsEndpoints))
		return
	}
	e := pm.Spec.PodMetricsEndpoints[0]
	if port := ptrOr(e.Port, ""); port != "admin" {
		p.add("%s: endpoint port %q, want admin", w, port)
	}
	if _, ok := containerPort(sc, "admin"); !ok {
		p.add("%s: the sidecar has no port named admin", w)
	}
	if e.Path != "/metrics" {
		p.add("%s: endpoint path %q, want /metrics", w, e.Path)
	}
}

func (b *bundle) checkPDB(p *problems, podLabels map[string]string) {
	if len(b.pdbs) != 1 {
		p.add("want one PodDisruptionBudget, got %d", len(b.pdbs))
		return
	}
	pdb := b.pdbs[0]
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.Type != intstr.Int || mu.IntVal != 1 || pdb.Spec.MinAvailable != nil {
		p.add("PodDisruptionBudget %s: want maxUnavailable: 1 (and no minAvailable)", pdb.Name)
	}
	if !selects(pdb.Spec.Selector, podLabels) {
		p.add("PodDisruptionBudget %s: its selector does not select the Deployment's pods", pdb.Name)
	}
}

// checkPeerTLS: with --peer-tls-* set, the three files are in a volume the sidecar
// mounts; a cert-manager CSI volume names the pod in the certificate's DNS names'
// first label (the node id) and is signed by an Issuer of the manifests.
func (b *bundle) checkPeerTLS(p *problems, spec *corev1.PodSpec, sc *corev1.Container, env map[string]string) {
	files := map[string]string{}
	for _, f := range []string{"peer-tls-cert", "peer-tls-key", "peer-tls-ca"} {
		if v := setting(sc, env, f, ""); v != "" {
			files[f] = v
		}
	}
	if len(files) == 0 {
		return
	}
	if len(files) != 3 {
		p.add("sidecar: set all of --peer-tls-cert, --peer-tls-key and --peer-tls-ca, or none; got %v", files)
	}
	vols := map[string]string{} // volume name → mount path
	for _, f := range slices.Sorted(maps.Keys(files)) {
		path, ok := files[f], false
		for _, m := range sc.VolumeMounts {
			if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
				ok = true
				vols[m.Name] = m.MountPath
			}
		}
		if !ok {
			p.add("sidecar: --%s %s is in no volume the sidecar mounts", f, path)
		}
	}
	for name := range vols {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
		if i < 0 {
			p.add("sidecar: mounts volume %q, which the pod does not have", name)
			continue
		}
		csi := spec.Volumes[i].CSI
		if csi == nil || csi.Driver != "csi.cert-manager.io" {
			continue
		}
		a := csi.VolumeAttributes
		w := "volume " + name + " (csi.cert-manager.io)"
		for _, n := range strings.Split(a["csi.cert-manager.io/dns-names"], ",") {
			if first, _, _ := strings.Cut(strings.TrimSpace(n), "."); first != "${POD_NAME}" {
				p.add("%s: DNS name %q: its first label must be ${POD_NAME}, the node id (FANOUT_NODE_ID is the pod's name; docs/SECURITY.md)", w, n)
			}
		}
		usages := a["csi.cert-manager.io/key-usages"]
		for _, u := range []string{"server auth", "client auth"} {
			if !strings.Contains(usages, u) {
				p.add("%s: key-usages %q lack %q: every node is a server and a client of its peers", w, usages, u)
			}
		}
		if g := a["csi.cert-manager.io/fs-group"]; spec.SecurityContext == nil || g != strconv.FormatInt(ptrOr(spec.SecurityContext.RunAsGroup, -1), 10) {
			p.add("%s: fs-group %q is not the pod's runAsGroup: the sidecar could not read its key", w, g)
		}
		issuer := a["csi.cert-manager.io/issuer-name"]
		if k := a["csi.cert-manager.io/issuer-kind"]; k != "" && k != "Issuer" {
			continue // a ClusterIssuer lives outside these manifests
		}
		j := slices.IndexFunc(b.issuers, func(is *cmIssuer) bool { return is.Name == issuer })
		if j < 0 {
			p.add("%s: issuer %q is not among the manifests' Issuers", w, issuer)
			continue
		}
		if ca := b.issuers[j].Spec.CA; ca != nil && !slices.ContainsFunc(b.certificates, func(c *cmCertificate) bool {
			return c.Spec.SecretName == ca.SecretName && c.Spec.IsCA
		}) {
			p.add("Issuer %s: its CA secret %q comes from no Certificate with isCA: true", issuer, ca.SecretName)
		}
	}
}

// TestRulesCatch breaks the rendered base in the ways the rules are there for, one at
// a time, and checks that each breakage is reported.
func TestRulesCatch(t *testing.T) {
	breakages := map[string]struct {
		mutate func(*bundle)
		want   string
		of     string // the kustomization; "" is the base
	}{
		"sidecar as a regular init container": {func(b *bundle) { sc(b).RestartPolicy = nil }, "restartPolicy must be Always", ""},
		"sidecar as a regular container": {func(b *bundle) {
			s := pod(b)
			s.Containers = append(s.Containers, *sc(b))
			s.InitContainers = nil
		}, "is a regular container", ""},
		"short grace period":      {func(b *bundle) { pod(b).TerminationGracePeriodSeconds = ptr(int64(10)) }, "terminationGracePeriodSeconds (10s) must be above --shutdown-timeout (10s)", ""},
		"longer shutdown timeout": {func(b *bundle) { setEnv(sc(b), "FANOUT_SHUTDOWN_TIMEOUT", "45s") }, "must be above --shutdown-timeout (45s)", ""},
		"HTTP readiness probe": {func(b *bundle) {
			sc(b).ReadinessProbe.GRPC = nil
			sc(b).ReadinessProbe.HTTPGet = &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(9090)}
		}, "readinessProbe must be a gRPC health check", ""},
		"liveness on readiness service": {func(b *bundle) { sc(b).LivenessProbe.GRPC.Service = ptr(readinessService) }, `livenessProbe asks for service "fanout.v1.FanoutService", want ""`, ""},
		"probe on the peer port":        {func(b *bundle) { sc(b).StartupProbe.GRPC.Port = 7071 }, "startupProbe calls port 7071", ""},
		"admin on loopback":             {func(b *bundle) { setEnv(sc(b), "FANOUT_ADMIN_ADDR", "127.0.0.1:9090") }, "listens on loopback only", ""},
		"short startup probe":           {func(b *bundle) { sc(b).StartupProbe.FailureThreshold = 5 }, "startupProbe allows 10s", ""},
		"not headless":                  {func(b *bundle) { b.services[0].Spec.ClusterIP = "" }, "clusterIP must be None", ""},
		"ready pods only":               {func(b *bundle) { b.services[0].Spec.PublishNotReadyAddresses = false }, "publishNotReadyAddresses must be true", ""},
		"peer port open to the namespace": {func(b *bundle) {
			b.netpols[0].Spec.Ingress[0].From[0].PodSelector = &metav1.LabelSelector{}
		}, "must select the pods by their", ""},
		"peer port open to all": {func(b *bundle) { b.netpols[0].Spec.Ingress[0].From = nil }, "opens the peer port to everyone", ""},
		"env not FANOUT":        {func(b *bundle) { setEnv(sc(b), "GOGC", "400") }, "env GOGC is not a FANOUT_* variable", ""},
		"node id by hand":       {func(b *bundle) { setEnv(sc(b), "FANOUT_NODE_ID", "a") }, "FANOUT_NODE_ID must come from the pod's name", ""},
		"writable root":         {func(b *bundle) { pod(b).Containers[0].SecurityContext.ReadOnlyRootFilesystem = nil }, "container app: readOnlyRootFilesystem must be true", ""},
		"no seccomp":            {func(b *bundle) { pod(b).SecurityContext.SeccompProfile = nil }, "seccompProfile must be RuntimeDefault", ""},
		"default state bounds": {func(b *bundle) {
			delEnv(sc(b), "FANOUT_STATE_MAX_BYTES")
			delEnv(sc(b), "FANOUT_STATE_MAX_KEYS")
		}, "a full state table takes up to 634 MiB", ""},
		"no memory limit": {func(b *bundle) { delete(sc(b).Resources.Limits, corev1.ResourceMemory) }, "container fanout: no memory limit", ""},
		"PDB minAvailable": {func(b *bundle) {
			b.pdbs[0].Spec.MaxUnavailable = nil
			b.pdbs[0].Spec.MinAvailable = ptr(intstr.FromInt32(2))
		}, "want maxUnavailable: 1", ""},
		"PodMonitor on the peer port":  {func(b *bundle) { b.podMonitors[0].Spec.PodMetricsEndpoints[0].Port = ptr("peer") }, `endpoint port "peer", want admin`, ""},
		"peers DNS to another Service": {func(b *bundle) { setEnv(sc(b), "FANOUT_PEERS_DNS", "other:7071") }, `names Service "other"`, ""},
		"peers DNS to the wrong port":  {func(b *bundle) { setEnv(sc(b), "FANOUT_PEERS_DNS", "fanout-peers:7000") }, "has no port matching", ""},
		"peers by SRV": {func(b *bundle) {
			setEnv(sc(b), "FANOUT_PEERS_DNS", "_peer._tcp.fanout-peers.default.svc.cluster.local")
		}, "", ""},
		"memory limit by hand": {func(b *bundle) { setEnv(sc(b), "FANOUT_MEMORY_LIMIT", "200MiB") }, "leave it at auto", ""},
		"certificate for a fixed name": {func(b *bundle) {
			pod(b).Volumes[0].CSI.VolumeAttributes["csi.cert-manager.io/dns-names"] = "fanout.fanout-peers.default.svc.cluster.local"
		}, "its first label must be ${POD_NAME}", "cert-manager"},
		"certificate for servers only": {func(b *bundle) {
			pod(b).Volumes[0].CSI.VolumeAttributes["csi.cert-manager.io/key-usages"] = "server auth,digital signature"
		}, `lack "client auth"`, "cert-manager"},
		"key unreadable":          {func(b *bundle) { delete(pod(b).Volumes[0].CSI.VolumeAttributes, "csi.cert-manager.io/fs-group") }, "the sidecar could not read its key", "cert-manager"},
		"certificate not mounted": {func(b *bundle) { sc(b).VolumeMounts = nil }, "--peer-tls-ca /var/run/fanout/tls/ca.crt is in no volume", "cert-manager"},
		"key file missing":        {func(b *bundle) { delEnv(sc(b), "FANOUT_PEER_TLS_KEY") }, "set all of --peer-tls-cert", "cert-manager"},
		"unknown issuer":          {func(b *bundle) { b.issuers = b.issuers[:1] }, `issuer "fanout-ca" is not among`, "cert-manager"},
	}
	for name, br := range breakages {
		t.Run(name, func(t *testing.T) {
			of := br.of
			if of == "" {
				of = "base"
			}
			b := renderedBundles(t)[of]
			br.mutate(b)
			got := b.check()
			if br.want == "" {
				if len(got) > 0 {
					t.Errorf("want no problem, got:\n%s", strings.Join(got, "\n"))
				}
				return
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, br.want) }) {
				t.Errorf("want a problem with %q, got:\n%s", br.want, strings.Join(got, "\n"))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func pod(b *bundle) *corev1.PodSpec { return &b.deployments[0].Spec.Template.Spec }

func sc(b *bundle) *corev1.Container {
	c, _ := sidecarOf(pod(b))
	return c
}

func setEnv(c *corev1.Container, name, value string) {
	delEnv(c, name)
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

func delEnv(c *corev1.Container, name string) {
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
}

// meshOnly are the serve flags only the mesh reads; the sidecar refuses each one set
// with --transport=jetstream (cmd/sidecar meshOnlyFlags).
var meshOnly = []string{"peer-addr", "peers", "peers-dns", "peers-refresh", "dns-server", "max-peers", "peer-removal-grace",
	"max-buffer", "max-buffer-bytes", "max-pending-bytes", "max-batch", "max-batch-bytes", "max-batching-delay",
	"batch-idle-flush", "workers", "replicate-stream", "replicate-timeout", "congestion-retry-delay", "network-failure-retry-delay",
	"breaker-failures", "breaker-open", "breaker-probes", "anti-entropy-interval", "sync-timeout",
	"peer-tls-cert", "peer-tls-key", "peer-tls-ca"}

// checkJetStream checks a sidecar on --transport=jetstream: a NATS URL, credentials
// from a Secret mounted read-only, none of the mesh's settings (the sidecar would
// refuse to start) and no headless Service of peers.
func (b *bundle) checkJetStream(p *problems, spec *corev1.PodSpec, sc *corev1.Container, env map[string]string, podLabels map[string]string) {
	for _, f := range meshOnly {
		if v := setting(sc, env, f, ""); v != "" {
			p.add("sidecar: --%s (%s) is set with --transport=jetstream, which refuses it: remove it", f, envName(f))
		}
	}
	if setting(sc, env, "nats-url", "") == "" {
		p.add("sidecar: no FANOUT_NATS_URL with --transport=jetstream: the sidecar would not start")
	}
	creds := setting(sc, env, "nats-creds", "")
	if creds == "" {
		p.add("sidecar: no FANOUT_NATS_CREDS: the NATS user's credentials file, from a Secret")
	} else {
		mounted := false
		for _, m := range sc.VolumeMounts {
			if !strings.HasPrefix(creds, strings.TrimSuffix(m.MountPath, "/")+"/") {
				continue
			}
			for _, v := range spec.Volumes {
				if v.Name == m.Name && v.Secret != nil && m.ReadOnly {
					mounted = true
				}
			}
		}
		if !mounted {
			p.add("sidecar: FANOUT_NATS_CREDS %q is not under a read-only mount of a Secret volume", creds)
		}
	}
	for _, s := range b.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone && selects(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, podLabels) {
			p.add("Service %s: a headless Service of the sidecars' pods: on --transport=jetstream nothing looks peers up", s.Name)
		}
	}
}
