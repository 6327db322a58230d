package webhook_test

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// withDemand gives the pool a valid demand policy, then lets change spoil it.
func withDemand(change func(d *gpupoolv1.DemandPolicy)) func(*gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) {
		p.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn,
			Windows: []gpupoolv1.DemandWindow{{Start: "0 12 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}}}}}}
		change(p.Spec.Demand)
	}
}

// setDemand sets a field of spec.demand as sent, for values the Go types cannot carry.
func setDemand(val any, path ...string) func(map[string]any) {
	return func(u map[string]any) {
		setField(map[string]any{"namespaceSelector": map[string]any{}, "rules": []any{map[string]any{"layout": "night", "action": "BringIn"}}}, "spec", "demand")(u)
		setField(val, append([]string{"spec", "demand"}, path...)...)(u)
	}
}

func demandCases() []badCase {
	const r0 = "spec.demand.rules[0]"
	return []badCase{
		{name: "demand without a namespace selector", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.NamespaceSelector = nil }),
			path: "spec.demand", fix: "namespaceSelector: {} to let the pods of every namespace count"},
		{name: "demand namespace selector with an unknown operator", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) {
			d.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Equals", Values: []string{"ml"}}}}
		}), path: "spec.demand.namespaceSelector.matchExpressions[0].operator", value: `"Equals"`},
		{name: "demand namespace selector In without values", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) {
			d.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn}}}
		}), path: "spec.demand.namespaceSelector.matchExpressions[0].values", fix: "must be specified"},
		{name: "demand pod selector with a bad label value", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) {
			d.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml team"}}
		}), path: "spec.demand.podSelector.matchLabels", value: `"ml team"`},
		{name: "demand rule names no layout", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.Rules[0].Layout = "training" }),
			path: r0 + ".layout", value: `"training"`, fix: `the layouts are "day", "night"`},
		{name: "demand rule with an unknown action", raw: setDemand([]any{map[string]any{"layout": "night", "action": "Prefer"}}, "rules"),
			path: r0 + ".action", value: `"Prefer"`, fix: `"BringIn", "Skip"`},
		{name: "demand without rules", raw: setDemand([]any{}, "rules"), path: "spec.demand.rules", fix: "at least 1"},
		{name: "two BringIn rules for one layout", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.Rules = append(d.Rules, d.Rules[0]) }),
			path: "spec.demand.rules[1]", value: "second BringIn rule", fix: "merge them"},
		{name: "demand window cron does not parse", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.Rules[0].Windows[0].Start = "0 12 * * mon-fry" }),
			path: r0 + ".windows[0].start", value: `"0 12 * * mon-fry"`},
		{name: "demand window of zero length", raw: setDemand([]any{map[string]any{"layout": "night", "action": "BringIn",
			"windows": []any{map[string]any{"start": "0 12 * * *", "duration": "0s"}}}}, "rules"),
			path: r0 + ".windows[0].duration", value: `not "0s"`, fix: "positive"},
		{name: "demand for in days", raw: setDemand([]any{map[string]any{"layout": "night", "action": "BringIn", "for": "1d"}}, "rules"),
			path: r0 + ".for", value: `not "1d"`, fix: "write 24h for a day"},
		{name: "negative idleFor", raw: setDemand([]any{map[string]any{"layout": "night", "action": "Skip", "idleFor": "-5m"}}, "rules"),
			path: r0 + ".idleFor", value: `not "-5m"`, fix: "zero or positive"},
		{name: "instead names the skipped layout", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) {
			d.Rules[0].Action, d.Rules[0].Instead = gpupoolv1.DemandSkip, "night"
		}), path: r0 + ".instead", value: `"night"`, fix: "leave it out for defaultLayout"},
		{name: "instead on a BringIn rule", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.Rules[0].Instead = "day" }),
			path: r0 + ".instead", fix: "Skip rules only"},
		{name: "BringIn and Skip of a layout with two thresholds", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) {
			d.Rules = append(d.Rules, gpupoolv1.DemandRule{Layout: "night", Action: gpupoolv1.DemandSkip, MinGPUs: ptr.To(int32(4))})
		}), path: "spec.demand.rules[1].minGPUs", value: "4", fix: "write the same value in both"},
		{name: "zero minGPUs", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.Rules[0].MinGPUs = ptr.To(int32(0)) }),
			path: r0 + ".minGPUs", fix: "1"},
		{name: "minDwell in words", raw: setDemand("half an hour", "minDwell"), path: "spec.demand.minDwell", value: `not "half an hour"`, fix: "such as 30m"},
		{name: "negative cooldown", raw: setDemand("-1m", "cooldown"), path: "spec.demand.cooldown", value: `not "-1m"`, fix: "zero or positive"},
		{name: "switch budget above the history", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.MaxSwitchesPerDay = ptr.To(int32(12)) }),
			path: "spec.demand.maxSwitchesPerDay", fix: "8"},
		{name: "zero switch budget", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.MaxSwitchesPerDay = ptr.To(int32(0)) }),
			path: "spec.demand.maxSwitchesPerDay", fix: "1"},
		{name: "negative maxEvictions", mutate: withDemand(func(d *gpupoolv1.DemandPolicy) { d.MaxEvictions = ptr.To(int32(-1)) }),
			path: "spec.demand.maxEvictions", fix: "0"},
	}
}

func accountingCases() []badCase {
	tenant := func(v string) func(*gpupoolv1.GPUPoolProfile) {
		return func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Accounting = &gpupoolv1.AccountingSpec{TenantLabel: v} }
	}
	return []badCase{
		{name: "accounting tenant label with a space", mutate: tenant("example.com/my team"), path: "spec.accounting.tenantLabel", value: `"example.com/my team"`, fix: "such as example.com/team"},
		{name: "accounting tenant label with two slashes", mutate: tenant("a/b/c"), path: "spec.accounting.tenantLabel", value: `"a/b/c"`, fix: "leave it out for the namespace"},
		{name: "accounting tenant label with an upper-case prefix", mutate: tenant("Example.com/team"), path: "spec.accounting.tenantLabel", value: `"Example.com/team"`, fix: "label key"},
		{name: "accounting tenant label only a prefix", mutate: tenant("example.com/"), path: "spec.accounting.tenantLabel", value: `"example.com/"`, fix: "label key"},
		{name: "accounting retention of no days", raw: setField(int64(0), "spec", "accounting", "retentionDays"), path: "spec.accounting.retentionDays", fix: "from 1 to 400 days"},
		{name: "accounting retention past 400 days", raw: setField(int64(401), "spec", "accounting", "retentionDays"), path: "spec.accounting.retentionDays", value: "401", fix: "leave it out for 35"},
		{name: "accounting retention negative", raw: setField(int64(-3), "spec", "accounting", "retentionDays"), path: "spec.accounting.retentionDays", fix: "from 1 to 400"},
	}
}
