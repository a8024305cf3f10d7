// Package document turns a live object into the document Reverser writes
// for it: it strips runtime fields (Sanitize), drops or marks for
// encryption the credentials a rule names (Policy), decides what is never
// mirrored (Skip, Mirrorable) and where a document lives in the
// repository (DocumentPath). Change and Scope are the vocabulary streams
// hand to branch workers. Pure functions: no lock, nothing blocks.
package document
