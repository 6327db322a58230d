package localenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpupool/gpupool/internal/ociimage"
)

// spawnManager starts the operator with the given flags. With Options.Image it runs the
// image's own files: the host platform's root filesystem is unpacked from the OCI layout
// and its entrypoint is run with the image's user, environment and working folder, as a
// container runtime would. As root it is chrooted into the root filesystem, so the
// manager sees only what the image holds (CA certificates, no zoneinfo, no shell); the
// kubeconfig and webhook certificate are copied into the image's /tmp. Otherwise the
// entrypoint runs from the unpacked folder as the current user.
func (e *Env) spawnManager(kubeconfig, certDir string, args ...string) error {
	if e.Image == "" {
		return e.spawnCmd("manager", filepath.Join(e.BinDir, "manager"),
			append([]string{"--kubeconfig", kubeconfig, "--webhook-cert-dir", certDir}, args...),
			append(os.Environ(), e.ManagerEnv...), "", nil)
	}
	rootfs := filepath.Join(e.Dir, "manager-rootfs")
	if err := os.RemoveAll(rootfs); err != nil {
		return err
	}
	platform := "linux/" + runtime.GOARCH
	cfg, err := ociimage.Unpack(e.Image, platform, rootfs)
	if err != nil {
		return fmt.Errorf("unpacking the manager image (run 'make image'): %w", err)
	}
	if len(cfg.Entrypoint) == 0 {
		return fmt.Errorf("the manager image has no entrypoint")
	}
	argv := append(append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...), args...)
	if os.Geteuid() != 0 {
		e.logf("==> running the manager from the image %s (%s; not root: without chroot, as uid %d)", e.Image, platform, os.Getuid())
		env := make([]string, 0, len(cfg.Env))
		for _, kv := range cfg.Env {
			if k, v, _ := strings.Cut(kv, "="); k == "SSL_CERT_FILE" {
				kv = k + "=" + filepath.Join(rootfs, v)
			}
			env = append(env, kv)
		}
		env = append(env, e.ManagerEnv...)
		argv = append(argv, "--kubeconfig", kubeconfig, "--webhook-cert-dir", certDir)
		return e.spawnCmd("manager", filepath.Join(rootfs, argv[0]), argv[1:], env, "", nil)
	}
	uid, gid, err := parseUser(cfg.User)
	if err != nil {
		return err
	}
	e.logf("==> running the manager from the image %s (%s, chroot, user %d:%d)", e.Image, platform, uid, gid)
	// What a pod would mount: the kubeconfig stands for the service account token, the
	// certificate folder for the Secret or emptyDir volume.
	inner := "/tmp/gpupool"
	if err := os.MkdirAll(filepath.Join(rootfs, inner, "certs"), 0o700); err != nil {
		return err
	}
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return err
	}
	if err := clientcmdapi.FlattenConfig(kc); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*kc, filepath.Join(rootfs, inner, "kubeconfig")); err != nil {
		return err
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(certDir, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(rootfs, inner, "certs", f), b, 0o600); err != nil {
			return err
		}
	}
	for _, p := range []string{inner, inner + "/kubeconfig", inner + "/certs", inner + "/certs/tls.crt", inner + "/certs/tls.key"} {
		if err := os.Lchown(filepath.Join(rootfs, p), int(uid), int(gid)); err != nil {
			return err
		}
	}
	argv = append(argv, "--kubeconfig", inner+"/kubeconfig", "--webhook-cert-dir", inner+"/certs")
	wd := cfg.WorkingDir
	if wd == "" {
		wd = "/"
	}
	return e.spawnCmd("manager", argv[0], argv[1:], append(cfg.Env, e.ManagerEnv...), wd, &syscall.SysProcAttr{
		Setpgid: true, Chroot: rootfs, Credential: &syscall.Credential{Uid: uid, Gid: gid},
	})
}

// checkManager fails early when the manager binary or image is missing.
func (o *Options) checkManager() error {
	if o.Image == "" {
		if _, err := os.Stat(filepath.Join(o.BinDir, "manager")); err != nil {
			return fmt.Errorf("manager is missing in %s: run 'make build' first", o.BinDir)
		}
		return nil
	}
	if _, err := os.Stat(filepath.Join(o.Image, "index.json")); err != nil {
		return fmt.Errorf("no OCI layout in %s: run 'make image' first", o.Image)
	}
	return nil
}

// parseUser reads an image config's numeric "uid[:gid]".
func parseUser(u string) (uint32, uint32, error) {
	us, gs, hasGroup := strings.Cut(u, ":")
	uid, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("image user %q is not numeric", u)
	}
	gid := uid
	if hasGroup {
		if gid, err = strconv.ParseUint(gs, 10, 32); err != nil {
			return 0, 0, fmt.Errorf("image group %q is not numeric", u)
		}
	}
	return uint32(uid), uint32(gid), nil
}

// spawnCmd is spawn with an environment, working folder and process attributes.
func (e *Env) spawnCmd(name, bin string, args, env []string, dir string, attr *syscall.SysProcAttr) error {
	if err := os.MkdirAll(filepath.Join(e.Dir, "logs"), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(e.Dir, "logs", name+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := &exec.Cmd{Path: bin, Args: append([]string{bin}, args...), Env: env, Dir: dir, Stdout: logf, Stderr: logf}
	if attr == nil {
		attr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(e.Dir, "pids", name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }() // reap it if it ends while we run
	return nil
}
