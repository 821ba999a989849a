# A tiny character-level GPT on the synthetic play, sized for one CPU core (~10 s).
# Used as: python gpt_configurator.py config/train_tiny_char.py --batch_size=16

out_dir = ''  # a temp dir; give a path to keep ckpt.pt
eval_interval = 50  # eval often: the job is short
eval_iters = 10
log_interval = 10

always_save_checkpoint = False  # only when val loss improves

dataset = 'synthetic_play'
dataset_chars = 200000
gradient_accumulation_steps = 1
batch_size = 32
block_size = 64  # context of up to 64 previous characters

# a baby GPT model
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.0

learning_rate = 2e-3  # baby networks can afford a high learning rate
max_iters = 250
decay_lr = False  # a fixed learning rate: a smaller batch sees fewer characters
beta2 = 0.99

device = 'cpu'  # run on a CPU core; --device=cuda on a GPU
