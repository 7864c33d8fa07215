package tests

import (
	"errors"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// netEnd is one end of a connection: a pod (namespace and labels) or, when
// pod is nil, an address outside the cluster.
type netEnd struct {
	name     string
	ns       string
	nsLabels map[string]string
	pod      map[string]string
	ip       string
}

// netFlow is a connection and whether the policies must let it through.
type netFlow struct {
	from, to netEnd
	port     int32
	proto    corev1.Protocol
	allowed  bool
}

// selects reports whether a label selector matches set; a nil selector
// matches nothing, an empty one everything.
func netSelects(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(set))
}

// netPeerMatches applies NetworkPolicy peer semantics: a podSelector alone
// means pods of the policy's namespace, a namespaceSelector alone every pod
// of the namespaces it selects, both together the pods selected in those
// namespaces; an ipBlock matches addresses outside the cluster.
func netPeerMatches(p networkingv1.NetworkPolicyPeer, policyNS string, e netEnd) bool {
	if p.IPBlock != nil {
		if e.pod != nil {
			return false
		}
		_, cidr, err := net.ParseCIDR(p.IPBlock.CIDR)
		ip := net.ParseIP(e.ip)
		if err != nil || ip == nil || !cidr.Contains(ip) {
			return false
		}
		for _, ex := range p.IPBlock.Except {
			if _, c, err := net.ParseCIDR(ex); err == nil && c.Contains(ip) {
				return false
			}
		}
		return true
	}
	if e.pod == nil {
		return false
	}
	nsOK := e.ns == policyNS
	if p.NamespaceSelector != nil {
		nsOK = netSelects(p.NamespaceSelector, e.nsLabels)
	}
	podOK := p.PodSelector == nil || netSelects(p.PodSelector, e.pod)
	return nsOK && podOK
}

func netPortMatches(ports []networkingv1.NetworkPolicyPort, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp == proto && (p.Port == nil || p.Port.IntValue() == int(port)) {
			return true
		}
	}
	return false
}

func netHasType(np *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	for _, pt := range np.Spec.PolicyTypes {
		if pt == t {
			return true
		}
	}
	return false
}

// netAllows evaluates the policies for one connection: each end that some
// policy isolates (in the direction that concerns it) must have a rule that
// lets the connection through.
func netAllows(pols map[string]*networkingv1.NetworkPolicy, f netFlow) bool {
	egressOK, ingressOK := true, true
	if f.from.pod != nil {
		isolated, ok := false, false
		for _, np := range pols {
			if np.Namespace != f.from.ns || !netHasType(np, networkingv1.PolicyTypeEgress) || !netSelects(&np.Spec.PodSelector, f.from.pod) {
				continue
			}
			isolated = true
			for _, r := range np.Spec.Egress {
				if !netPortMatches(r.Ports, f.port, f.proto) {
					continue
				}
				if len(r.To) == 0 {
					ok = true
				}
				for _, peer := range r.To {
					ok = ok || netPeerMatches(peer, np.Namespace, f.to)
				}
			}
		}
		egressOK = !isolated || ok
	}
	if f.to.pod != nil {
		isolated, ok := false, false
		for _, np := range pols {
			if np.Namespace != f.to.ns || !netHasType(np, networkingv1.PolicyTypeIngress) || !netSelects(&np.Spec.PodSelector, f.to.pod) {
				continue
			}
			isolated = true
			for _, r := range np.Spec.Ingress {
				if !netPortMatches(r.Ports, f.port, f.proto) {
					continue
				}
				if len(r.From) == 0 {
					ok = true
				}
				for _, peer := range r.From {
					ok = ok || netPeerMatches(peer, np.Namespace, f.from)
				}
			}
		}
		ingressOK = !isolated || ok
	}
	return egressOK && ingressOK
}

// checkDeployNetworkPolicies evaluates the NetworkPolicies for the
// connections that must work and those that must not: only edges, deciders
// and labelled callers reach the decider's port; only deciders (and etcd's
// peers) reach etcd; edges reach the deciders, DNS and the internet's 443
// and nothing private.
func checkDeployNetworkPolicies(b *deployBundle) error {
	if len(b.netpols) == 0 {
		return errors.New("no NetworkPolicy: every pod would accept connections from anywhere")
	}
	tmpl := func(program string) (netEnd, error) {
		for _, w := range b.workloads() {
			if w.labels[deployNameLabel] == program {
				return netEnd{name: w.name, ns: deployNamespace, nsLabels: map[string]string{"kubernetes.io/metadata.name": deployNamespace}, pod: w.labels}, nil
			}
		}
		return netEnd{}, fmt.Errorf("no workload runs %s", program)
	}
	edge, err1 := tmpl("edge")
	decider, err2 := tmpl("decider")
	etcd, err3 := tmpl("etcd")
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	ns := func(name string, extra map[string]string) map[string]string {
		m := map[string]string{"kubernetes.io/metadata.name": name}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	clientNS := ns("billing", map[string]string{"switchboard.ai/decider-clients": "true"})
	var (
		internet   = netEnd{name: "internet", ip: "203.0.113.10"}
		metadata   = netEnd{name: "cloud metadata", ip: "169.254.169.254"}
		private    = netEnd{name: "a private address", ip: "10.1.2.3"}
		dns        = netEnd{name: "kube-dns", ns: "kube-system", nsLabels: ns("kube-system", nil), pod: map[string]string{"k8s-app": "kube-dns"}}
		stranger   = netEnd{name: "another pod of the namespace", ns: deployNamespace, nsLabels: ns(deployNamespace, nil), pod: map[string]string{"app": "other"}}
		outsider   = netEnd{name: "a pod of another namespace", ns: "default", nsLabels: ns("default", nil), pod: map[string]string{"switchboard.ai/decider-client": "true"}}
		localCall  = netEnd{name: "a labelled caller of the namespace", ns: deployNamespace, nsLabels: ns(deployNamespace, nil), pod: map[string]string{"switchboard.ai/decider-client": "true"}}
		farCall    = netEnd{name: "a labelled caller of a labelled namespace", ns: "billing", nsLabels: clientNS, pod: map[string]string{"switchboard.ai/decider-client": "true"}}
		farPlain   = netEnd{name: "an unlabelled pod of a labelled namespace", ns: "billing", nsLabels: clientNS, pod: map[string]string{"app": "web"}}
		prometheus = netEnd{name: "Prometheus", ns: "monitoring", nsLabels: ns("monitoring", nil), pod: map[string]string{"app.kubernetes.io/name": "prometheus"}}
	)
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	flows := []netFlow{
		{internet, edge, 8080, tcp, true},
		{edge, decider, 9090, tcp, true},
		{edge, internet, 443, tcp, true},
		{edge, dns, 53, udp, true},
		{decider, decider, 9090, tcp, true},
		{decider, etcd, 2379, tcp, true},
		{decider, dns, 53, udp, true},
		{etcd, etcd, 2380, tcp, true},
		{localCall, decider, 9090, tcp, true},
		{farCall, decider, 9090, tcp, true},

		{internet, decider, 9090, tcp, false},
		{internet, etcd, 2379, tcp, false},
		{edge, etcd, 2379, tcp, false},
		{edge, metadata, 80, tcp, false},
		{edge, metadata, 443, tcp, false},
		{edge, private, 443, tcp, false},
		{edge, internet, 80, tcp, false},
		{decider, internet, 443, tcp, false},
		{stranger, decider, 9090, tcp, false},
		{stranger, etcd, 2379, tcp, false},
		{outsider, decider, 9090, tcp, false},
		{farPlain, decider, 9090, tcp, false},
		{localCall, etcd, 2379, tcp, false},
		{etcd, internet, 443, tcp, false},
		// The admin listeners (metrics, health, the dashboard) are for the
		// scraper only.
		{prometheus, edge, 9191, tcp, true},
		{prometheus, decider, 9190, tcp, true},
		{internet, edge, 9191, tcp, false},
		{stranger, edge, 9191, tcp, false},
		{internet, decider, 9190, tcp, false},
		{stranger, decider, 9190, tcp, false},
		{localCall, decider, 9190, tcp, false},
		{prometheus, decider, 9090, tcp, false},
		{prometheus, etcd, 2379, tcp, false},
	}
	var errs []error
	for _, f := range flows {
		if got := netAllows(b.netpols, f); got != f.allowed {
			verb := "must not"
			if f.allowed {
				verb = "must"
			}
			errs = append(errs, fmt.Errorf("%s %s reach %s on %s/%d", f.from.name, verb, f.to.name, f.proto, f.port))
		}
	}
	return errors.Join(errs...)
}
