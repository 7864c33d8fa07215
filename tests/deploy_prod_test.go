package tests

// Checks of what the overlays add to the manifests' wiring: StatefulSets and
// their Services, the selectors of scheduling rules, the edges' autoscaling,
// and, in production, what losing a node must not break.

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deciderapp "github.com/switchboard-ai/switchboard/services/decider/app"
)

// deployStreamsMetric is the per-pod metric, as the custom metrics API serves
// it, that production's edge HorizontalPodAutoscalers scale on: the edge's
// API requests in flight, open streams included.
const deployStreamsMetric = "switchboard_edge_requests_in_flight"

// deployHostnameKey is the node label a required anti-affinity spreads by.
const deployHostnameKey = "kubernetes.io/hostname"

// checkDeployEdgeHPA requires an edge autoscaler to keep two pods or more,
// to scale on CPU against the requests, and in production also on the
// requests in flight per pod.
func checkDeployEdgeHPA(h *autoscalingv2.HorizontalPodAutoscaler, production bool) error {
	var errs []error
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas <= *h.Spec.MinReplicas {
		errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: want minReplicas of 2 or more and a larger maxReplicas", h.Name))
	}
	var cpu, streams bool
	for _, m := range h.Spec.Metrics {
		switch {
		case m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU:
			t := m.Resource.Target
			cpu = t.Type == autoscalingv2.UtilizationMetricType && t.AverageUtilization != nil &&
				*t.AverageUtilization > 0 && *t.AverageUtilization <= 90
		case m.Type == autoscalingv2.PodsMetricSourceType && m.Pods != nil && m.Pods.Metric.Name == deployStreamsMetric:
			t := m.Pods.Target
			streams = t.Type == autoscalingv2.AverageValueMetricType && t.AverageValue != nil && t.AverageValue.Sign() > 0
		}
	}
	if !cpu {
		errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: want a CPU Utilization target of at most 90%%", h.Name))
	}
	if production && !streams {
		errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: production scales edges on %s (Pods metric, AverageValue) as well as CPU", h.Name, deployStreamsMetric))
	}
	return errors.Join(errs...)
}

// checkDeployStatefulSets requires each StatefulSet's serviceName to be a
// headless Service of the bundle that selects its pods (the pods' DNS names
// come from it), and the ready-only Service edges dial to be one that does
// not publish pods before they are ready.
func checkDeployStatefulSets(b *deployBundle) error {
	var errs []error
	for _, name := range deploySorted(deployKeys(b.statefulSets)) {
		sts := b.statefulSets[name]
		svc, ok := b.services[sts.Spec.ServiceName]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("StatefulSet %s: serviceName %q is not a Service", name, sts.Spec.ServiceName))
			continue
		case svc.Spec.ClusterIP != corev1.ClusterIPNone:
			errs = append(errs, fmt.Errorf("StatefulSet %s: Service %s must be headless (clusterIP: None) to give its pods DNS names", name, svc.Name))
		}
		ws := b.selecting(svc.Spec.Selector)
		if len(ws) != 1 || ws[0].kind != "StatefulSet" || ws[0].name != name {
			errs = append(errs, fmt.Errorf("StatefulSet %s: Service %s selects %v, not this StatefulSet's pods", name, svc.Name, ws))
		}
		if sts.Spec.Template.Labels[deployNameLabel] == "decider" && svc.Spec.PublishNotReadyAddresses {
			errs = append(errs, fmt.Errorf("StatefulSet %s: Service %s publishes pods that are not ready, so edges would dial deciders still starting or draining", name, svc.Name))
		}
	}
	return errors.Join(errs...)
}

// checkDeployScheduling requires the label selectors of every workload's
// spread constraints and (anti-)affinity terms to select its own pods, as
// the API server would accept them: a selector that matches nothing spreads
// nothing.
func checkDeployScheduling(b *deployBundle) error {
	var errs []error
	for _, w := range b.workloads() {
		own := func(what string, sel *metav1.LabelSelector) {
			if !netSelects(sel, w.labels) {
				errs = append(errs, fmt.Errorf("%s: %s selector %v does not select its own pods", w, what, sel))
			}
		}
		for _, c := range w.pod.TopologySpreadConstraints {
			own("topologySpreadConstraint "+c.TopologyKey, c.LabelSelector)
			for _, k := range c.MatchLabelKeys {
				if c.LabelSelector != nil && c.LabelSelector.MatchLabels[k] != "" {
					errs = append(errs, fmt.Errorf("%s: topologySpreadConstraint %s: key %s is in both matchLabelKeys and labelSelector, which the API refuses", w, c.TopologyKey, k))
				}
			}
		}
		if a := w.pod.Affinity; a != nil && a.PodAntiAffinity != nil {
			for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				own("required podAntiAffinity "+t.TopologyKey, t.LabelSelector)
			}
			for _, t := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				own("preferred podAntiAffinity "+t.PodAffinityTerm.TopologyKey, t.PodAffinityTerm.LabelSelector)
			}
		}
	}
	return errors.Join(errs...)
}

// checkDeployState requires every data directory to be where the overlay
// promises it survives: etcd's always on a PersistentVolumeClaim of its
// StatefulSet; in production also each decider's (its activity log), with
// three deciders or more and etcd members on distinct nodes.
func checkDeployState(b *deployBundle) error {
	var errs []error
	for _, w := range b.workloads() {
		if w.labels[deployNameLabel] != "etcd" {
			continue
		}
		args, err := deployArgs(w.pod.Containers[0].Args)
		if err != nil {
			continue // checkDeployEtcd reports it
		}
		if err := deployOnClaim(w, &w.pod.Containers[0], args["data-dir"]); err != nil {
			errs = append(errs, fmt.Errorf("%s: --data-dir: %w", w, err))
		}
		if b.spec.production && !deployRequiredAntiAffinity(w) {
			errs = append(errs, fmt.Errorf("%s: production needs a required podAntiAffinity on %s selecting its own pods: two members on one node lose the quorum with it", w, deployHostnameKey))
		}
	}
	if !b.spec.production {
		return errors.Join(errs...)
	}
	ps, _ := b.programs() // errors are checkDeployFlags'
	for _, p := range ps {
		cfg, ok := p.cfg.(deciderapp.Config)
		if !ok {
			continue
		}
		if p.workload.kind != "StatefulSet" {
			errs = append(errs, fmt.Errorf("%s: production runs the deciders as a StatefulSet, each with its own volume", p.workload))
		}
		if err := deployOnClaim(p.workload, p.container, cfg.DataDir); err != nil {
			errs = append(errs, fmt.Errorf("%s: --data-dir %s (the activity log): %w", p.workload, cfg.DataDir, err))
		}
		if p.workload.replicas < 3 {
			errs = append(errs, fmt.Errorf("%s: production runs 3 deciders or more", p.workload))
		}
	}
	return errors.Join(errs...)
}

// deployOnClaim requires dir in container c of w to be on a volume of w's
// volumeClaimTemplates: the deepest mount holding it must be a claim's.
func deployOnClaim(w deployWorkload, c *corev1.Container, dir string) error {
	if dir == "" || !filepath.IsAbs(dir) {
		return fmt.Errorf("%q is not an absolute path", dir)
	}
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		mp := filepath.Clean(m.MountPath)
		if (dir == mp || strings.HasPrefix(dir, mp+"/")) && (best == nil || len(mp) > len(filepath.Clean(best.MountPath))) {
			best = m
		}
	}
	switch {
	case best == nil:
		return errors.New("on no volume: the read-only root filesystem")
	case !slices.Contains(w.claims, best.Name):
		return fmt.Errorf("on volume %s, which is no PersistentVolumeClaim of the StatefulSet (volumeClaimTemplates %v)", best.Name, w.claims)
	case w.pod.SecurityContext == nil || w.pod.SecurityContext.FSGroup == nil:
		return fmt.Errorf("on claim %s without the pod's fsGroup: a new volume is root's, and the non-root program cannot write it", best.Name)
	}
	for _, v := range w.pod.Volumes {
		if v.Name == best.Name {
			return fmt.Errorf("volume %s is also a pod volume, which takes the place of the claim", v.Name)
		}
	}
	return nil
}

// deployRequiredAntiAffinity reports whether w may never put two of its pods
// on one node.
func deployRequiredAntiAffinity(w deployWorkload) bool {
	a := w.pod.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey == deployHostnameKey && netSelects(t.LabelSelector, w.labels) {
			return true
		}
	}
	return false
}
