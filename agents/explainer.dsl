// explainer: explains a concept or an error message in plain words.
// Invocable. The legacy .dsl extension is accepted like .symbi.
metadata { description = "Explains a concept or an error message in plain words" }

agent explainer {
    capabilities = ["explain"]
}
