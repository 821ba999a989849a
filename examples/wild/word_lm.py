# Word-level language modeling with an LSTM, in the style of the classic PyTorch example.
# ruff: noqa: UP004, UP008, UP032  (old-style classes and str.format are part of the style)
#
# The corpus is generated on the fly by a small seeded "grammar" (topics, word classes,
# Zipfian word choice), so the script needs no download. Everything else is the old recipe:
# batchify the token stream into columns, truncated BPTT with repackaged hidden states,
# a hand-written SGD update with gradient clipping, and the learning rate divided by 4
# whenever the validation loss stops improving.
#
#   python word_lm.py --epochs 3 --batch_size 20 --lr 20
import argparse
import math
import os
import random
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description='PyTorch synthetic-corpus RNN/LSTM Language Model')
parser.add_argument('--model', type=str, default='LSTM',
                    help='type of recurrent net (RNN_TANH, RNN_RELU, LSTM, GRU)')
parser.add_argument('--emsize', type=int, default=200,
                    help='size of word embeddings')
parser.add_argument('--nhid', type=int, default=200,
                    help='number of hidden units per layer')
parser.add_argument('--nlayers', type=int, default=2,
                    help='number of layers')
parser.add_argument('--lr', type=float, default=20,
                    help='initial learning rate')
parser.add_argument('--clip', type=float, default=0.25,
                    help='gradient clipping')
parser.add_argument('--epochs', type=int, default=4,
                    help='upper epoch limit')
parser.add_argument('--batch_size', type=int, default=20, metavar='N',
                    help='batch size')
parser.add_argument('--bptt', type=int, default=35,
                    help='sequence length')
parser.add_argument('--dropout', type=float, default=0.2,
                    help='dropout applied to layers (0 = no dropout)')
parser.add_argument('--tied', action='store_true',
                    help='tie the word embedding and softmax weights')
parser.add_argument('--seed', type=int, default=1111,
                    help='random seed')
parser.add_argument('--cuda', action='store_true',
                    help='use CUDA')
parser.add_argument('--log-interval', type=int, default=200, metavar='N',
                    help='report interval')
parser.add_argument('--save', type=str, default='',
                    help='path to save the final model (default: a temp dir)')
parser.add_argument('--train-words', type=int, default=80000,
                    help='approximate number of words in the generated training split')
args = parser.parse_args()

# Set the random seed manually for reproducibility.
torch.manual_seed(args.seed)
if torch.cuda.is_available() and not args.cuda:
    print("WARNING: You have a CUDA device, so you should probably run with --cuda")

device = torch.device("cuda" if args.cuda else "cpu")

###############################################################################
# Load data
###############################################################################


class Dictionary(object):
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class SyntheticText(object):
    """A toy language: topics pick their own nouns/verbs, sentences follow a few templates."""

    SYLLABLES = ['ka', 'lo', 'mi', 'ten', 'ra', 'su', 'vel', 'po', 'dan', 'ri', 'no', 'sha',
                 'qu', 'bre', 'ti', 'mor', 'el', 'an', 'gu', 'fi', 'zo', 'pre', 'las', 'ku']
    FUNCTION = {
        'DET': ['the', 'a', 'this', 'every', 'some', 'that'],
        'PREP': ['of', 'in', 'on', 'with', 'near', 'under', 'from', 'about'],
        'CONJ': ['and', 'but', 'because', 'while'],
        'PRON': ['he', 'she', 'they', 'it', 'we'],
    }

    def __init__(self, seed, n_nouns=500, n_verbs=250, n_adjs=150, n_advs=60, n_topics=12):
        self.rng = random.Random(seed)
        seen = set(w for ws in self.FUNCTION.values() for w in ws)
        self.nouns = self._words(n_nouns, seen)
        self.verbs = [w + 's' for w in self._words(n_verbs, seen)]
        self.adjs = [w + 'ic' for w in self._words(n_adjs, seen)]
        self.advs = [w + 'ly' for w in self._words(n_advs, seen)]
        # each topic prefers a slice of the nouns/verbs/adjectives, in a Zipfian order
        self.topics = []
        for _ in range(n_topics):
            self.topics.append({
                'NOUN': self.rng.sample(self.nouns, 80),
                'VERB': self.rng.sample(self.verbs, 40),
                'ADJ': self.rng.sample(self.adjs, 30),
            })

    def _words(self, n, seen):
        out = []
        while len(out) < n:
            w = ''.join(self.rng.choice(self.SYLLABLES) for _ in range(self.rng.randint(1, 3)))
            if w not in seen:
                seen.add(w)
                out.append(w)
        return out

    def _zipf(self, words):
        # P(rank r) ~ 1 / (r + 1)
        weights = [1.0 / (r + 1) for r in range(len(words))]
        return self.rng.choices(words, weights=weights)[0]

    def _pick(self, cls, topic):
        if cls in self.FUNCTION:
            return self.rng.choice(self.FUNCTION[cls])
        if cls == 'ADV':
            return self._zipf(self.advs)
        if self.rng.random() < 0.85:
            return self._zipf(topic[cls])
        pool = {'NOUN': self.nouns, 'VERB': self.verbs, 'ADJ': self.adjs}[cls]
        return self.rng.choice(pool)

    def _noun_phrase(self, topic):
        words = [self._pick('DET', topic)]
        if self.rng.random() < 0.4:
            words.append(self._pick('ADJ', topic))
        words.append(self._pick('NOUN', topic))
        if self.rng.random() < 0.2:
            words += [self._pick('PREP', topic)] + self._noun_phrase(topic)[:3]
        return words

    def _clause(self, topic):
        subj = [self._pick('PRON', topic)] if self.rng.random() < 0.25 else self._noun_phrase(topic)
        words = subj + [self._pick('VERB', topic)]
        r = self.rng.random()
        if r < 0.6:
            words += self._noun_phrase(topic)
        elif r < 0.8:
            words += [self._pick('PREP', topic)] + self._noun_phrase(topic)
        if self.rng.random() < 0.2:
            words.append(self._pick('ADV', topic))
        return words

    def sentence(self, topic):
        words = self._clause(topic)
        if self.rng.random() < 0.3:
            words += [self._pick('CONJ', topic)] + self._clause(topic)
        return words + ['.']

    def paragraph(self):
        topic = self.rng.choice(self.topics)
        return [self.sentence(topic) for _ in range(self.rng.randint(3, 8))]

    def lines(self, n_words):
        out, total = [], 0
        while total < n_words:
            for s in self.paragraph():
                out.append(' '.join(s))
                total += len(s) + 1
        return out


class Corpus(object):
    def __init__(self, train_words, seed=0):
        self.dictionary = Dictionary()
        text = SyntheticText(seed)
        self.train = self.tokenize(text.lines(train_words))
        self.valid = self.tokenize(text.lines(train_words // 10))
        self.test = self.tokenize(text.lines(train_words // 10))

    def tokenize(self, lines):
        """Tokenizes a list of lines, adding <eos> at the end of each."""
        idss = []
        for line in lines:
            words = line.split() + ['<eos>']
            ids = [self.dictionary.add_word(word) for word in words]
            idss.append(torch.tensor(ids, dtype=torch.int64))
        return torch.cat(idss)


corpus = Corpus(args.train_words)

# Starting from sequential data, batchify arranges the dataset into columns.
# For instance, with the alphabet as the sequence and batch size 4, we'd get
# ┌ a g m s ┐
# │ b h n t │
# │ c i o u │
# │ d j p v │
# │ e k q w │
# └ f l r x ┘.
# These columns are treated as independent by the model, which means that the
# dependence of e. g. 'g' on 'f' can not be learned, but allows more efficient
# batch processing.


def batchify(data, bsz):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


eval_batch_size = 10
train_data = batchify(corpus.train, args.batch_size)
val_data = batchify(corpus.valid, eval_batch_size)
test_data = batchify(corpus.test, eval_batch_size)

###############################################################################
# Build the model
###############################################################################


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)


ntokens = len(corpus.dictionary)
model = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers,
                 args.dropout, args.tied).to(device)

criterion = nn.NLLLoss()

###############################################################################
# Training code
###############################################################################


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


# get_batch subdivides the source data into chunks of length args.bptt.
# If source is equal to the example output of the batchify function, with
# a bptt-limit of 2, we'd get the following two Variables for i = 0:
# ┌ a g m s ┐ ┌ b h n t ┐
# └ b h n t ┘ └ c i o u ┘
# Note that despite the name of the function, the subdivison of data is not
# done along the batch dimension (i.e. dimension 1), since that was handled
# by the batchify function. The chunks are along dimension 0, corresponding
# to the seq_len dimension in the LSTM.


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def evaluate(data_source):
    # Turn on evaluation mode which disables dropout.
    model.eval()
    total_loss = 0.
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train():
    # Turn on training mode which enables dropout.
    model.train()
    total_loss = 0.
    start_time = time.time()
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        # If we didn't, the model would try backpropagating all the way to start of the dataset.
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()

        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)

        total_loss += loss.item()

        if batch % args.log_interval == 0 and batch > 0:
            cur_loss = total_loss / args.log_interval
            elapsed = time.time() - start_time
            print('| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | '
                  'loss {:5.2f} | ppl {:8.2f}'.format(
                      epoch, batch, len(train_data) // args.bptt, lr,
                      elapsed * 1000 / args.log_interval, cur_loss, math.exp(cur_loss)))
            total_loss = 0
            start_time = time.time()


# Loop over epochs.
lr = args.lr
best_val_loss = None
save_dir = None
if not args.save:
    save_dir = tempfile.TemporaryDirectory(prefix='word_lm_')
    args.save = os.path.join(save_dir.name, 'model.pt')

# At any point you can hit Ctrl + C to break out of training early.
try:
    for epoch in range(1, args.epochs + 1):
        epoch_start_time = time.time()
        train()
        val_loss = evaluate(val_data)
        print('-' * 89)
        print('| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | '
              'valid ppl {:8.2f}'.format(epoch, (time.time() - epoch_start_time),
                                         val_loss, math.exp(val_loss)))
        print('-' * 89)
        # Save the model if the validation loss is the best we've seen so far.
        if not best_val_loss or val_loss < best_val_loss:
            with open(args.save, 'wb') as f:
                torch.save(model.state_dict(), f)
            best_val_loss = val_loss
        else:
            # Anneal the learning rate if no improvement has been seen in the validation dataset.
            lr /= 4.0
except KeyboardInterrupt:
    print('-' * 89)
    print('Exiting from training early')

# Load the best saved model.
with open(args.save, 'rb') as f:
    model.load_state_dict(torch.load(f, weights_only=True))
    # after load the rnn params are not a continuous chunk of memory
    # this makes them a continuous chunk, and will speed up forward pass
    model.rnn.flatten_parameters()

# Run on test data.
test_loss = evaluate(test_data)
print('=' * 89)
print('| End of training | test loss {:5.2f} | test ppl {:8.2f}'.format(
    test_loss, math.exp(test_loss)))
print('=' * 89)

if save_dir is not None:
    save_dir.cleanup()
