package localenv

import (
	"bytes"
	"os"
	"path/filepath"
	"text/template"
)

// PoolFile is the file in the state folder that holds the ready pool Up writes.
const PoolFile = "pool.yaml"

// PoolVCenter is what a pool needs to know of the environment's vCenter.
type PoolVCenter struct {
	// Server is vgpusim's host:port.
	Server string
	// Datacenter is the datacenter the VMs are in.
	Datacenter string
	// Thumbprint is the SHA-256 fingerprint of vgpusim's certificate.
	Thumbprint string
	// SecretName and SecretNamespace name the credentials Secret Up created.
	SecretName, SecretNamespace string
}

// poolTemplate is samples/daynight.yaml (the test keeps them in step) with the
// environment's vCenter, pinned by thumbprint: what a person applies to try gpupool.
var poolTemplate = template.Must(template.New(PoolFile).Parse(`# The day/night pool of samples/daynight.yaml on this local environment, written by
# 'gpupool-local up': one ESXi host with one 16 GB Tesla P100. By day (08:00-20:00 on
# weekdays, Europe/Berlin) four small nodes with grid_p100-4q; at night and at weekends
# one big node with grid_p100-16q.
#
#   kubectl apply -f {{.File}}
#   kubectl gpupool status daynight
#   kubectl gpupool switch daynight night --for 10m --reason "try it"
apiVersion: gpupool.dev/v1alpha1
kind: GPUPoolProfile
metadata:
  name: daynight
spec:
  vcenter:
    server: {{printf "%q" .Server}}
    datacenter: {{printf "%q" .Datacenter}}
    credentialsSecretRef:
      name: {{.SecretName}}
      namespace: {{.SecretNamespace}}
    # SHA-256 fingerprint of vgpusim's certificate (govc about.cert -thumbprint -k).
    thumbprint: {{printf "%q" .Thumbprint}}
  layouts:
    - name: day
      workers:
        - {vm: gpu-day-1, profile: grid_p100-4q}
        - {vm: gpu-day-2, profile: grid_p100-4q}
        - {vm: gpu-day-3, profile: grid_p100-4q}
        - {vm: gpu-day-4, profile: grid_p100-4q}
      nodeLabels:
        lab.example/workload: inference
    - name: night
      workers:
        - {vm: gpu-night-1, profile: grid_p100-16q}
      nodeLabels:
        lab.example/workload: training
  schedule:
    timeZone: Europe/Berlin
    windows:
      - layout: day
        start: "0 8 * * 1-5"
        duration: 12h
    # Start switching 10 minutes early so day nodes are Ready at 08:00.
    leadTime: 10m
  defaultLayout: night
  parking: Suspend
  drain:
    timeout: 15m
    onTimeout: Abort
    deleteEmptyDirData: true
  maxParallel: 1
`))

// RenderPool writes the ready pool for a vCenter; file is the path its comment names.
func RenderPool(vc PoolVCenter, file string) ([]byte, error) {
	var b bytes.Buffer
	err := poolTemplate.Execute(&b, struct {
		PoolVCenter
		File string
	}{vc, file})
	return b.Bytes(), err
}

// writePool writes Dir/pool.yaml for the running environment.
func (e *Env) writePool() (string, error) {
	file := filepath.Join(e.Dir, PoolFile)
	data, err := RenderPool(PoolVCenter{Server: e.VCenter.Server, Datacenter: e.VCenter.Datacenter, Thumbprint: e.Thumbprint,
		SecretName: credentialsSecret, SecretNamespace: credentialsNamespace}, file)
	if err != nil {
		return "", err
	}
	return file, os.WriteFile(file, data, 0o644)
}
