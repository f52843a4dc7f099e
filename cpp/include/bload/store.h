// Deprecated name of <bload/sequence_store.h> (bload 0.3): the reader of the sequence store is
// named sequence_store in every language (Python's bload.SequenceStore, bload/sequence_store.py);
// `store` names the writer (Python's bload.store.write). Include <bload/sequence_store.h>.
#pragma once
#include "bload/sequence_store.h"
