package vgpusim

import (
	"fmt"
	"testing"
)

// StartT starts a simulator of the inventory doc (YAML) for a test, failing the test
// when the inventory does not load or the simulator does not start, and closes it when
// the test ends. Templates such as OneHostDayNight are filled in by the caller.
func StartT(t testing.TB, doc string) *Sim {
	t.Helper()
	inv, err := Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return StartInventoryT(t, inv, Options{})
}

// StartInventoryT is StartT for an inventory already loaded (LoadFile, or a test's
// changes to one), with options.
func StartInventoryT(t testing.TB, inv *Inventory, opts Options) *Sim {
	t.Helper()
	sim, err := Start(inv, opts)
	if err != nil {
		t.Fatal(fmt.Errorf("starting vgpusim: %w", err))
	}
	t.Cleanup(sim.Close)
	return sim
}
