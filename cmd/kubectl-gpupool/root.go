package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/version"
)

// app is what every verb shares: kubectl's connection flags, the output flag, the
// streams and the clock (tests set it).
type app struct {
	config  *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	scheme  *runtime.Scheme
	// tz is --tz: the zone times are shown in; when empty, the pool's (screenFor).
	tz  string
	now func() time.Time
	// wrapClient, when set, wraps the client every verb uses: tests put an interceptor
	// there to change the pool between a verb's read and its write.
	wrapClient func(client.Client) client.Client
	// watched, when set, is told every pool state status -w and switch --wait saw, after
	// they handled it: tests step the world from there and cancel after N updates.
	watched func(*gpupoolv1.GPUPoolProfile)
	// podSeen, when set, is told every pod change record saw, after it recorded it.
	podSeen func(p *corev1.Pod, deleted bool)
	// requests, when set, reads the pools' GPUPoolRequests for status (nil: status shows
	// the spec only).
	requests client.Reader
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newApp(streams, time.Now).command()
}

// newApp makes the plugin with a clock: tests pass a fixed one.
func newApp(streams genericiooptions.IOStreams, now func() time.Time) *app {
	a := &app{config: genericclioptions.NewConfigFlags(true), streams: streams, scheme: runtime.NewScheme(), now: now}
	// Pools are cluster-scoped: a --namespace would be accepted and mean nothing (plan
	// --live reads the credentials Secret from the namespace the pool names), so the
	// plugin does not offer it.
	a.config.Namespace = nil
	_ = clientgoscheme.AddToScheme(a.scheme)
	_ = gpupoolv1.AddToScheme(a.scheme)
	return a
}

func (a *app) command() *cobra.Command {
	streams := a.streams
	root := &cobra.Command{
		Use:   "kubectl-gpupool",
		Short: "See and steer gpupool vGPU pools",
		Long: `See and steer gpupool vGPU pools with Kubernetes credentials only.

Reading (status, plan, history, timeline, report) needs get on gpupoolprofiles and, for
report, list on gpupoolusages (ClusterRole gpupool-viewer); switch, resume, pause and
unpause need patch (gpupool-editor).`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl gpupool"},
		Version:       version.Get(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("kubectl-gpupool {{.Version}}\n")
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	a.config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&a.tz, "tz", "", "IANA time zone to show every time in, such as Europe/Berlin (default: the pool's schedule.timeZone; the local zone for pools of several zones)")
	root.AddCommand(a.statusCommand(), a.planCommand(), a.switchCommand(), a.resumeCommand(),
		a.pauseCommand(true), a.pauseCommand(false), a.resetBudgetCommand(), a.historyCommand(), a.timelineCommand(), a.reportCommand(), a.recordCommand(), a.simulateCommand(), a.versionCommand())
	a.registerCompletions(root)
	return root
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(a.streams.Out, "kubectl-gpupool %s\n", version.Get())
			return err
		},
	}
}

// fieldOwner is the field manager of the plugin's writes.
const fieldOwner = gpupoolv1.FieldManagerCLI

// client is a client for the current kubeconfig, context and user.
func (a *app) client() (client.Client, error) {
	cfg, err := a.config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: a.scheme})
	if err != nil {
		return nil, err
	}
	// The plugin's writes go under a field manager of their own (docs/gitops.md).
	c = client.WithFieldOwner(c, fieldOwner)
	if a.wrapClient == nil {
		return c, nil
	}
	return a.wrapClient(c), nil
}

// get reads one pool.
func (a *app) get(ctx context.Context, name string) (*gpupoolv1.GPUPoolProfile, client.Client, error) {
	c, err := a.client()
	if err != nil {
		return nil, nil, err
	}
	var p gpupoolv1.GPUPoolProfile
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		return nil, nil, err
	}
	return &p, c, nil
}
