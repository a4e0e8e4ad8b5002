package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

// model is what the requests of one set carry in their principal and resource: a policy
// whose scope names another entity type (a misspelt Respnse, Agnet) would never apply,
// and a forbid so placed would deny nothing, unsaid.
type model struct {
	principals []string            // the principal's entity types
	resources  []string            // the resource's entity types
	ids        map[string][]string // for an entity type, the ids its entities can have (Tool: the tool kinds)
}

var (
	// respondModel: principal Agent; resource Response (respond) or Tool (use_tool).
	respondModel = model{principals: []string{"Agent"}, resources: []string{"Response", "Tool"},
		ids: map[string][]string{"Tool": ToolKinds}}
	// accessModel: principal Caller; resource Agent (start_run) or Run.
	accessModel = model{principals: []string{"Caller"}, resources: []string{"Agent", "Run"}}
)

// scopeProblem returns why p's principal or resource scope names what no request of the
// set carries ("" when it names nothing such).
func (m model) scopeProblem(p *cedar.Policy) string {
	a := (*xast.Policy)(p.AST())
	for _, s := range []struct {
		what  string
		node  xast.IsScopeNode
		types []string
	}{{"principal", a.Principal, m.principals}, {"resource", a.Resource, m.resources}} {
		var named []types.EntityType
		var uids []types.EntityUID
		switch scope := s.node.(type) {
		case xast.ScopeTypeEq:
			uids = append(uids, scope.Entity)
		case xast.ScopeTypeIn:
			uids = append(uids, scope.Entity)
		case xast.ScopeTypeIs:
			named = append(named, scope.Type)
		case xast.ScopeTypeIsIn:
			named = append(named, scope.Type)
			uids = append(uids, scope.Entity)
		}
		for _, u := range uids {
			named = append(named, u.Type)
		}
		for _, t := range named {
			if !slices.Contains(s.types, string(t)) {
				return fmt.Sprintf("its %s scope names the entity type %s, which no %s of this set is (%s): it would never apply (a misspelt type?)",
					s.what, t, s.what, strings.Join(s.types, ", "))
			}
		}
		for _, u := range uids {
			if ids, ok := m.ids[string(u.Type)]; ok && !slices.Contains(ids, string(u.ID)) {
				return fmt.Sprintf("its %s scope names %s::%q, which no %s of this set is (the %s ids are %s): it would never apply (a misspelt id?)",
					s.what, u.Type, string(u.ID), s.what, u.Type, strings.Join(ids, ", "))
			}
		}
	}
	return ""
}
