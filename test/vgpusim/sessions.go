package vgpusim

import (
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
)

// Logins is how many Login calls the simulator has served since the start or ResetCalls,
// refused ones included: what vCenter counts towards an account's lockout.
func (s *Sim) Logins() int { return s.Calls("Login") }

// Sessions is how many sessions the simulated vCenter holds now: those logged in and not
// logged out (vCenter caps this number). Sessions ended by ExpireSessions still count
// until logged out, as on vCenter.
func (s *Sim) Sessions() int {
	// A throwaway session view: vcsim lists the sessions on the SessionManager only when
	// read through a session.
	view := &simulator.Session{Registry: simulator.NewRegistry(), Map: s.model.Map()}
	sm, ok := view.Get(*s.model.ServiceContent.SessionManager).(*simulator.SessionManager)
	if !ok {
		return 0
	}
	return len(sm.SessionList)
}

// PasswordChecks is how many logins, of the SOAP API and of the REST API, the
// simulator has checked the password of since it started: what vCenter counts towards
// an account's lockout. vgpusim's own REST logins (AttachTag, the inventory's tags)
// count too.
func (s *Sim) PasswordChecks() int {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	return s.ctl.passwordChecks
}

// SetPassword changes the password the simulator accepts from now on, as when the vCenter
// account's password is rotated. Existing sessions stay logged in; logins with the old
// password are refused with InvalidLogin.
func (s *Sim) SetPassword(password string) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	s.ctl.password = password
}

// checkLogin is vcsim's login check (SessionManager.ValidLogin), installed once at Start
// so that SetPassword can change the password while the simulator serves.
func (s *Sim) checkLogin(req *types.Login) bool {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	s.ctl.passwordChecks++
	want := s.Password
	if s.ctl.password != "" {
		want = s.ctl.password
	}
	return req.UserName == s.Username && req.Password == want
}
