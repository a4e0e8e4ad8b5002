package journal_test

import (
	"fmt"
	"os"

	"symbi/internal/journal"
)

// Example writes a one-record-per-step run and verifies it against its receipt.
func Example() {
	dir, _ := os.MkdirTemp("", "journal-example")
	defer os.RemoveAll(dir)
	root, _ := os.Open(dir)
	defer root.Close()

	store, err := journal.OpenStore(root, journal.StoreOptions{Create: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	w, _ := store.Create("5ea0897b-c36e-5f04-bdd0-fc151f6172eb", "0b7e8a52-6f1d-4c3a-9e2b-5d4c3b2a1f00")
	defer w.Close()
	w.Append(journal.Started{Agent: "greeter", Mode: "text_response", Surface: "mcp-server", Prompt: "Hello?"})
	w.Append(journal.InferenceRequested{CallID: "call-1", MaxTokens: 4096})
	w.Sync() // durable before the model is called
	w.Append(journal.InferenceFinished{CallID: "call-1", Outcome: "completed", HTTPStatus: 200, Text: "Hi."})
	w.Sync()
	w.Append(journal.PolicyEvaluated{Action: "respond", Decision: "allow"})
	w.Append(journal.Terminated{Reason: "completed", Released: true, DurationMS: 12})
	if err := w.Sync(); err != nil {
		fmt.Println("withhold the text:", err)
		return
	}

	rc := w.Receipt()
	r := journal.Verify(w.Path(), store.PublicKey(), journal.VerifyOptions{Head: rc.Head, Records: rc.Records})
	fmt.Println(r.Status, r.Records, r.TerminalReason, r.ExitCode())
	// Output: complete 5 completed 0
}
