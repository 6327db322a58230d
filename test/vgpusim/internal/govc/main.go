// Command govc is govc built from the govmomi module gpupool already requires, with the
// commands gpupool's tests and demos use. govmomi v0.56.0 keeps govc's command
// implementations in github.com/vmware/govmomi/cli; its govc main package is a separate
// module that is not published, so this file is that main package, trimmed.
package main

import (
	"os"

	"github.com/vmware/govmomi/cli"

	_ "github.com/vmware/govmomi/cli/about"
	_ "github.com/vmware/govmomi/cli/datacenter"
	_ "github.com/vmware/govmomi/cli/device"
	_ "github.com/vmware/govmomi/cli/env"
	_ "github.com/vmware/govmomi/cli/events"
	_ "github.com/vmware/govmomi/cli/folder"
	_ "github.com/vmware/govmomi/cli/gpu/host"
	_ "github.com/vmware/govmomi/cli/gpu/host/profile"
	_ "github.com/vmware/govmomi/cli/gpu/vm"
	_ "github.com/vmware/govmomi/cli/host"
	_ "github.com/vmware/govmomi/cli/host/maintenance"
	_ "github.com/vmware/govmomi/cli/object"
	_ "github.com/vmware/govmomi/cli/session"
	_ "github.com/vmware/govmomi/cli/tags"
	_ "github.com/vmware/govmomi/cli/tags/association"
	_ "github.com/vmware/govmomi/cli/tags/category"
	_ "github.com/vmware/govmomi/cli/task"
	_ "github.com/vmware/govmomi/cli/version"
	_ "github.com/vmware/govmomi/cli/vm"
)

func main() {
	os.Exit(cli.Run(os.Args[1:]))
}
