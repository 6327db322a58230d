package vgpusim

// OneHostDayNight is the smallest day/night world, shared by the test suites that drive
// a pool through it: one host with one 16 GB P100, four grid_p100-4q day VMs running and
// one grid_p100-16q night VM powered off. It is a template for fmt: %[1]s stands for a
// prefix that keeps the objects of tests sharing one API server apart.
const OneHostDayNight = `
datacenter: dc1
hosts:
  - name: %[1]sesx-01
    policy: performance
    gpus:
      - {model: Tesla P100, memoryGiB: 16, pciId: "0000:3b:00.0"}
    profiles:
      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}
      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}
vms:
  - {name: %[1]sday-1, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]sday-2, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]sday-3, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]sday-4, host: %[1]sesx-01, profile: grid_p100-4q, powerState: poweredOn}
  - {name: %[1]snight-1, host: %[1]sesx-01, profile: grid_p100-16q, powerState: poweredOff}
`
