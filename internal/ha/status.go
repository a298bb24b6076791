package ha

import "github.com/kvfabric/kvfabric/internal/master"

// Service returns the Service of the term this Master leads, nil while it
// stands by: the master's HTTP listener serves its status
// (master.HTTPHandler) while it leads.
func (m *Master) Service() *master.Service { return m.router.Service() }
