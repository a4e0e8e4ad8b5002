package mcpserver

// DuplicateMember exposes duplicateMember to the external tests.
var DuplicateMember = duplicateMember
