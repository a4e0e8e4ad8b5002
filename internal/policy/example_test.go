package policy_test

import (
	"fmt"
	"os"
	"path/filepath"

	"symbi/internal/policy"
)

// Load a project's policies from its pinned directory and decide two answers.
func Example() {
	dir, _ := os.MkdirTemp("", "policy-example")
	defer os.RemoveAll(dir)
	os.MkdirAll(filepath.Join(dir, "policies"), 0o755)
	os.WriteFile(filepath.Join(dir, "policies", "gate.cedar"), []byte(`
@id("respond")
permit (principal is Agent, action == Action::"respond", resource is Response);

@id("no-private-keys")
forbid (principal, action == Action::"respond", resource)
when { context.response like "*BEGIN PRIVATE KEY*" };
`), 0o644)

	root, _ := os.Open(dir)
	defer root.Close()
	set := policy.Load(root)
	fmt.Println(set.Mode, set.Files, set.PolicyIDs())

	req := policy.Request{Action: policy.ActionRespond, Surface: policy.Surface, Caller: "stdio", Agent: "assistant", AgentID: policy.AgentID("assistant"), RunID: "run-1"}
	for _, text := range []string{"All tests pass.", "-----BEGIN PRIVATE KEY-----"} {
		req.Response = text
		d := set.Decide(req)
		fmt.Println(d.Allow, d.Policies, d.Reason)
	}
	// Output:
	// cedar [policies/gate.cedar] [respond no-private-keys]
	// true [respond] allowed by permit respond
	// false [no-private-keys] denied by forbid no-private-keys
}
