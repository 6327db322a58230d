package vsphere

// Op is a vSphere operation gpupool starts on a VM. Its value is what the controller
// records in a worker's status.task.operation (before it starts the task, so that a
// restarted controller can find the task with FindTask), and it names the task's
// events (PowerOnStarted, SuspendFailed, ...) and the vsphere task error metric label.
type Op string

// The operations, one per task-starting method of Client.
const (
	// OpPowerOn powers on or resumes a VM (Client.PowerOn).
	OpPowerOn Op = "PowerOn"
	// OpPowerOff powers a VM off (Client.PowerOff).
	OpPowerOff Op = "PowerOff"
	// OpSuspend suspends a VM (Client.Suspend).
	OpSuspend Op = "Suspend"
	// OpReconfigure changes a VM's vGPU devices (Client.SetProfile).
	OpReconfigure Op = "Reconfigure"
)

// descriptionIDs are the descriptionId of the task each operation starts, as vCenter
// names them.
var descriptionIDs = map[Op]string{
	OpPowerOn:     "VirtualMachine.powerOn",
	OpPowerOff:    "VirtualMachine.powerOff",
	OpSuspend:     "VirtualMachine.suspend",
	OpReconfigure: "VirtualMachine.reconfigure",
}
