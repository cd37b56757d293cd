import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const REPO = join(here, '..', '..', '..');
export const FIXTURES = join(REPO, 'plugins', 'replicaset', 'fixtures');
export const DEFAULT_SPEC = join(REPO, 'wit', 'default-pod-spec.json');
